"""exporting."""
