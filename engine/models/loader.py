"""Build the model class the checkpoint's architecture registered and fill it with the checkpoint's
weights."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Protocol

import torch
from torch import nn

from engine.checkpoint.errors import CheckpointError
from engine.checkpoint.fp8 import dequantize_fp8_weights
from engine.checkpoint.model_config import ModelConfig
from engine.checkpoint.weights import iter_weights
from engine.distributed.group import SINGLE, TPGroup
from engine.layers.attention import AttentionMetadata, KVCacheLayer
from engine.layers.batch_invariant import batch_invariant
from engine.layers.cpu_weight_layout import arrange_cpu_weights
from engine.layers.moe import fuse_shared_experts
from engine.models import registry
from kernels._common import kernels_mode


class CausalLMModel(Protocol):
    """What the runner needs of a model class (built as ``cls(cfg, dtype, device, max_position, tp)``)."""

    def attention_layers(self) -> list[KVCacheLayer]:
        """The layers that own a KV cache, in the order of ``registry.kv_cache_specs``."""
        ...

    def forward(
        self, token_ids: torch.Tensor, positions: torch.Tensor, meta: AttentionMetadata
    ) -> torch.Tensor: ...

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor: ...

    def decode_logits(
        self,
        token_ids: torch.Tensor,
        positions: torch.Tensor,
        meta: AttentionMetadata,
        out: torch.Tensor | None = None,
    ) -> torch.Tensor: ...

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None: ...


def load_model(
    model_dir: str | Path,
    cfg: ModelConfig,
    dtype: torch.dtype,
    device: torch.device,
    max_position: int,
    load_format: str = "auto",
    seed: int = 0,
    gguf_weights: str = "dequantize",
    tp_group: TPGroup = SINGLE,
) -> CausalLMModel:
    """``tp_group``: the tensor-parallel rank this process builds; it loads only its slice of each tensor."""
    triton = kernels_mode() == "triton" or (kernels_mode() == "auto" and device.type == "cuda")
    if batch_invariant() and triton and (cfg.moe is not None or cfg.mla is not None):
        kind = "mixture-of-experts" if cfg.moe is not None else "multi-head latent attention"
        raise ValueError(
            f"batch_invariant is not supported for {kind} models on Triton kernels yet (their expert "
            "GEMMs and latent attention still tile by batch size; a CPU's torch path runs them "
            "invariantly); start without batch_invariant"
        )
    model = registry.model_class(cfg)(cfg, dtype, device, max_position, tp_group)
    if load_format == "dummy":
        fill_random_weights(model, seed)
        return _ready(model)
    try:
        weights = iter_weights(model_dir, keep_int4=_keeps_int4(gguf_weights, device))
        if cfg.fp8_block_size is not None:
            weights = dequantize_fp8_weights(weights, cfg.fp8_block_size)
        model.load_weights(weights)
    except ValueError as exc:
        if isinstance(exc, CheckpointError):
            raise
        raise CheckpointError(model_dir, str(exc)) from exc
    return _ready(model)


def _ready(model: nn.Module) -> CausalLMModel:
    """The loaded weights in the layouts they run in: shared experts fused, CPU weights arranged."""
    fuse_shared_experts(model)
    arrange_cpu_weights(model)
    return model.eval()


def _keeps_int4(gguf_weights: str, device: torch.device) -> bool:
    """Whether a GGUF file's 4-bit projections stay 4-bit (``EngineConfig.gguf_weights``)."""
    if gguf_weights != "int4" or device.type != "cpu":
        return False  # the int4 kernel packs for a CPU; elsewhere they load dequantized
    if batch_invariant():
        raise ValueError(
            "gguf_weights int4 is not batch-invariant (the int4 kernel's sums may follow the row "
            "count); start without batch_invariant or with gguf_weights dequantize"
        )
    return True


@torch.no_grad()
def fill_random_weights(model: nn.Module, seed: int, std: float = 0.02) -> None:
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
