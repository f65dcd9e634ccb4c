"""Profiling: hooks the executor reports into, collectors, msprof-style outputs."""
