"""engine/testing."""
