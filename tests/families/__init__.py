"""Tiny-model variants, one module per adapter family; tests/tiny.py collects their ``VARIANTS``."""
