"""Prompt templates: the shipped wording, a user's own file, and the builders for the
perception, reasoning and consistency prompts.
"""
