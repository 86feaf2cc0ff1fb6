from __future__ import annotations

import torch
from torch import nn

from engine.distributed.group import SINGLE, TPGroup
from engine.distributed.sharding import even_rows
from engine.layers.parallel_linear import ColumnParallelLinear, RowParallelLinear
from kernels.activation import gelu_tanh_and_mul, silu_and_mul

# The gated activations by their config.json name (engine.models.llama.ACTIVATIONS).
_GATES = {"silu": silu_and_mul, "gelu_pytorch_tanh": gelu_tanh_and_mul}


class GatedMLP(nn.Module):
    """SwiGLU: down(silu(gate(x)) * up(x)), with gate and up fused into one matmul (and, for
    decode-sized batches on the Triton GEMV, the activation fused into the down projection);
    ``activation="gelu_pytorch_tanh"``: Gemma's GeGLU, with the tanh GELU in silu's place (not fused
    into the GEMV).

    Tensor-parallel: gate/up split by intermediate rows, down by the same columns, one all-reduce.
    """

    def __init__(
        self,
        hidden: int,
        intermediate: int,
        dtype: torch.dtype,
        device: torch.device,
        group: TPGroup = SINGLE,
        activation: str = "silu",
    ) -> None:
        super().__init__()
        if activation not in _GATES:
            raise ValueError(f"activation {activation!r} is not supported ({', '.join(_GATES)})")
        self.activation = activation
        rows = even_rows(intermediate, group.world_size, group.rank)
        self.gate_up_proj = ColumnParallelLinear(
            hidden, [intermediate, intermediate], [rows, rows], False, dtype, device
        )
        self.down_proj = RowParallelLinear(intermediate, rows, hidden, False, dtype, device, group)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(self.gate_up_proj(x))

    def down(self, gate_up: torch.Tensor) -> torch.Tensor:
        """The rest of ``forward`` after the gate/up projection (which the caller may have fused
        with the norm before it)."""
        if self.activation == "silu" and self.down_proj.fuses_silu(gate_up):
            return self.down_proj.forward_silu(gate_up)
        return self.down_proj(_GATES[self.activation](gate_up))
