"""Report writers: they read the inspection result (a JSON-contract dict) and know nothing about checkpoints."""
