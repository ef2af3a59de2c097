"""Benchmarks (pytest-benchmark): ``python -m pytest benchmarks --benchmark-only``.

Not part of the test suite: they measure, they assert nothing about time.
"""
