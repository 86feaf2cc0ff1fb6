"""engine/executor."""
