"""Build the decoder for a checkpoint and fill it with the checkpoint's weights."""

from __future__ import annotations

from pathlib import Path

import torch

from engine.checkpoint.errors import CheckpointError
from engine.checkpoint.model_config import ModelConfig
from engine.checkpoint.weights import iter_weights
from engine.distributed.group import SINGLE, TPGroup
from engine.models.decoder import CausalLM


def load_model(
    model_dir: str | Path,
    cfg: ModelConfig,
    dtype: torch.dtype,
    device: torch.device,
    max_position: int,
    load_format: str = "auto",
    seed: int = 0,
    tp_group: TPGroup = SINGLE,
) -> CausalLM:
    """``tp_group``: the tensor-parallel rank this process builds; it loads only its slice of each tensor."""
    model = CausalLM(cfg, dtype, device, max_position, tp_group)
    if load_format == "dummy":
        fill_random_weights(model, seed)
        return model.eval()
    try:
        model.load_weights(iter_weights(model_dir))
    except ValueError as exc:
        if isinstance(exc, CheckpointError):
            raise
        raise CheckpointError(model_dir, str(exc)) from exc
    return model.eval()


@torch.no_grad()
def fill_random_weights(model: CausalLM, seed: int, std: float = 0.02) -> None:
    """Seeded random weights on the model's own device (norm weights stay at one). Each
    tensor-parallel rank draws its own shard, so values depend on the rank count (speed does not)."""
    generator = None
    for name, param in model.named_parameters():
        if generator is None or generator.device != param.device:
            generator = torch.Generator(device=param.device).manual_seed(seed)
        if "norm" in name:
            param.fill_(1.0)
        else:
            param.normal_(0.0, std, generator=generator)
