"""exporting."""

#: ``export --dtype`` choices, here so the command line lists them without importing torch.
DTYPE_NAMES = ("keep", "float32", "float64", "bfloat16", "float16")
