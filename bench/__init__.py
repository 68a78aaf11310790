"""Benchmark harness for idinspect (not part of the unit tests).

Run ``python -m bench.run`` (full) or ``python -m bench.run --quick`` (development); see
docs/benchmarks.md. Synthetic checkpoints are cached under ``bench/cache/`` (git-ignored) and the
results are written as JSON under ``bench/results/``.
"""
