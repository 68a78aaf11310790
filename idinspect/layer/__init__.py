"""layer."""
