"""Tiny-model variants, one module per adapter family; tests/support/tiny.py collects their ``VARIANTS``."""
