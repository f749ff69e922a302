"""Benchmarks of gpu-pool-scaler (see docs/bench.md)."""
