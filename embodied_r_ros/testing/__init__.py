"""Helpers for tests, demos and benchmarks that users may run too (tiny locally built
models).
"""
