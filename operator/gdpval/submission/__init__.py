"""The official-format submission package and the per-sample results table."""
