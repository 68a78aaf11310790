"""equivalence."""
