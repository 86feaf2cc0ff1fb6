"""Build the decoder for a checkpoint and fill it with the checkpoint's weights."""

from __future__ import annotations

from pathlib import Path

import torch

from engine.checkpoint.errors import CheckpointError
from engine.checkpoint.model_config import ModelConfig
from engine.checkpoint.weights import iter_weights
from engine.models.decoder import CausalLM


def load_model(
    model_dir: str | Path, cfg: ModelConfig, dtype: torch.dtype, device: torch.device, max_position: int
) -> CausalLM:
    model = CausalLM(cfg, dtype, device, max_position)
    try:
        model.load_weights(iter_weights(model_dir))
    except ValueError as exc:
        if isinstance(exc, CheckpointError):
            raise
        raise CheckpointError(model_dir, str(exc)) from exc
    return model.eval()
