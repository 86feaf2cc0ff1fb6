"""engine/core."""
