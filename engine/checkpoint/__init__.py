"""Reading Hugging Face model directories: config, weights, generation config, cheap inspection."""

from engine.checkpoint.errors import CheckpointError
from engine.checkpoint.model_config import ModelConfig, load_model_config
from engine.models.registry import supported_architectures

__all__ = ["CheckpointError", "ModelConfig", "load_model_config", "supported_architectures"]
