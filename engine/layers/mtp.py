"""DeepSeek-V3's multi-token-prediction (MTP) layers, stored after the decoder layers as
``model.layers.{num_layers + i}.*`` (enorm, hnorm, eh_proj, shared_head, and a whole decoder layer).
Loaded and held as tensors for speculative decoding to build on; decoding does not run them."""

from __future__ import annotations

import torch


class MTPWeights:
    def __init__(self, num_layers: int, num_mtp_layers: int, dtype: torch.dtype) -> None:
        self.first = num_layers
        self.dtype = dtype
        # One dict per MTP layer: tensor name inside the layer (e.g. "eh_proj.weight") -> tensor.
        self.layers: list[dict[str, torch.Tensor]] = [{} for _ in range(num_mtp_layers)]

    def keep(self, name: str, tensor: torch.Tensor) -> bool:
        """Hold ``name`` (without the ``model.`` prefix) if it belongs to an MTP layer; False otherwise."""
        parts = name.split(".", 2)
        if len(parts) < 3 or parts[0] != "layers" or not parts[1].isdigit():
            return False
        index = int(parts[1]) - self.first
        if not 0 <= index < len(self.layers):
            return False
        if tensor.is_floating_point():
            tensor = tensor.to(self.dtype)
        self.layers[index][parts[2]] = tensor
        return True
