"""Engine tests use the suite's tiny checkpoints (``tiny_models``, ``tiny_qwen3``, ``tiny_llama``),
made once per session by ``tests/support/checkpoints.py``."""
