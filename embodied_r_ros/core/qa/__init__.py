"""Question answering: admission queue, request limits, waiting for descriptions, the
answerer, answer parsing and the consistency judge.
"""
