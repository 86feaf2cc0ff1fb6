"""Chat templates for the tiny generated checkpoints (package data)."""
