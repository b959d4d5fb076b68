"""Benchmarks, each measured against its floor in the same run: ``python -m bench``."""
