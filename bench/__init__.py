"""Benchmarks: ``python -m bench.<name>``; results go to bench/RESULTS.md."""
