"""Benchmarks (scripts, not tests): ``python -m bench.throughput --help``."""
