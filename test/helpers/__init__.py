"""Helpers shared by the tests (importable as `helpers.<module>`: test/ is on sys.path)."""
