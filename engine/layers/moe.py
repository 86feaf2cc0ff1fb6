"""A mixture-of-experts MLP: the router picks ``top_k`` of ``num_experts`` SwiGLU experts per token
(``engine.layers.router``), ``kernels.fused_moe`` runs them and sums their outputs by the router's
weights, and shared experts (DeepSeek), when the config has them, see every token.

Tensor parallel (world size k): every expert, and the shared experts, keep 1/k of their intermediate
rows (gate/up rows and the matching down columns), as GatedMLP does; the router is replicated, so
every rank routes alike. The routed and shared partial sums are added, then all-reduced once.

Expert parallel (``engine.distributed.expert_parallel``, when the model is built inside
``building_expert_parallel``): this rank holds only the experts its ``placement`` gives it, one per
slot of ``w13``/``w2``; the routed pairs travel to their experts' ranks and back, and the shared
experts, replicated, run while the rows travel.

Shared experts fused (``EngineConfig.shared_experts``, ``fuse_shared_experts`` after loading): a
SwiGLU MLP of intermediate size s*I is the sum of s MLPs of size I (its gate/up rows and down
columns cut in s), so the shared experts become experts E .. E + s - 1 of ``w13``/``w2``, which the
router appends to every token's top-k at weight 1. At one token DeepSeek-V2-Lite's layer then runs
one expert kernel pair instead of it plus a gate/up GEMV, an activated down GEMV and an add. Single
GPU only (tensor parallel would all-reduce them anyway; expert parallel runs them while rows travel).

Eager steps (prompt chunks, mixed steps, long verify steps) on one GPU run the block from CUDA graphs
captured at a ladder of token counts (``engine.runner.moe_graphs``): eagerly it issues ~20 launches
whose host time exceeds their GPU time below a few thousand tokens.

Routing statistics: ``expert_token_counts`` counts the tokens routed to each expert since the model
was built or last reset (added by the router as it routes, no host sync); ``routing_statistics`` reads them
for metrics. A CUDA-graph decode step also counts its padding rows.
"""

from __future__ import annotations

import torch
from torch import nn

from engine.checkpoint.moe_config import MoEConfig
from engine.config import SHARED_EXPERTS_MODES
from engine.distributed.expert_parallel import ExpertDispatch, exchange_experts, layout_being_built
from engine.distributed.expert_placement import ExpertPlacement
from engine.distributed.group import SINGLE, TPGroup
from engine.distributed.sharding import even_rows
from engine.layers.linear import matmul
from engine.layers.mlp import GatedMLP
from engine.layers.router import Router
from kernels._common import use_triton
from kernels.activation import silu_and_mul
from kernels.fused_moe import fused_moe
from kernels.gemv import gemv_silu
from kernels.mode_switch import ModeSwitch

shared_experts_switch = ModeSwitch("shared_experts", SHARED_EXPERTS_MODES)


def set_shared_experts_mode(mode: str) -> str:
    """How models built from now on run shared experts (``EngineConfig.shared_experts``); returns the
    previous choice."""
    return shared_experts_switch.set(mode)


def shared_experts_mode() -> str:
    return shared_experts_switch.mode


# The projections of one expert as checkpoints name them -> (our stacked weight, half of w13).
EXPERT_PROJECTIONS = {"gate_proj": ("w13", 0), "up_proj": ("w13", 1), "down_proj": ("w2", 0)}


class FusedExperts(nn.Module):
    """All routed experts' weights, stacked: ``w13 [E, 2*I_rank, H]`` (gate rows, then up rows) and
    ``w2 [E, H, I_rank]``, this rank's slice of each loaded from per-expert checkpoint tensors."""

    def __init__(
        self,
        hidden: int,
        moe: MoEConfig,
        dtype: torch.dtype,
        device: torch.device,
        tp: TPGroup,
        placement: ExpertPlacement | None = None,
        ep_rank: int = 0,
    ) -> None:
        """``placement``: expert parallel, this module holds rank ``ep_rank``'s slots of it."""
        super().__init__()
        self.num_experts, self.full_intermediate = moe.num_experts, moe.intermediate_size
        self.row_slice = even_rows(moe.intermediate_size, tp.world_size, tp.rank)
        self.local_experts = (
            placement.slots[ep_rank] if placement is not None else tuple(range(moe.num_experts))
        )
        rows = self.row_slice[1]
        slots = len(self.local_experts)
        self.w13 = nn.Parameter(
            torch.empty(slots, 2 * rows, hidden, dtype=dtype, device=device), requires_grad=False
        )
        self.w2 = nn.Parameter(
            torch.empty(slots, hidden, rows, dtype=dtype, device=device), requires_grad=False
        )

    def checkpoint_names(self) -> list[str]:
        """Every tensor this module loads, as ``load_projection`` names it (``<expert>.<projection>``)."""
        return [f"{e}.{p}" for e in range(self.num_experts) for p in EXPERT_PROJECTIONS]

    @torch.no_grad()
    def load_projection(self, expert: int, projection: str, tensor: torch.Tensor) -> None:
        """Copy in this rank's rows (gate/up) or columns (down) of one expert's ``projection``, into
        every slot that holds the expert (none: another expert-parallel rank's)."""
        if not 0 <= expert < self.num_experts:
            raise ValueError(f"expert {expert} is out of range (0..{self.num_experts - 1})")
        target, half = EXPERT_PROJECTIONS[projection]
        hidden, full = self.w2.shape[1], self.full_intermediate
        expected = (full, hidden) if target == "w13" else (hidden, full)
        if tuple(tensor.shape) != expected:
            raise ValueError(f"shape {tuple(tensor.shape)}, expected {expected}")
        start, rows = self.row_slice
        for slot in (s for s, held in enumerate(self.local_experts) if held == expert):
            if target == "w13":
                self.w13[slot, half * rows : (half + 1) * rows].copy_(tensor.narrow(0, start, rows))
            else:
                self.w2[slot].copy_(tensor.narrow(1, start, rows))

    def replace(self, placement: ExpertPlacement, rank: int, w13: torch.Tensor, w2: torch.Tensor) -> None:
        """Hold ``placement``'s experts for ``rank`` from now on (the load balancer's new plan)."""
        self.local_experts = placement.slots[rank]
        self.w13 = nn.Parameter(w13, requires_grad=False)
        self.w2 = nn.Parameter(w2, requires_grad=False)


class MoE(nn.Module):
    def __init__(
        self,
        hidden_size: int,
        moe: MoEConfig,
        dtype: torch.dtype,
        device: torch.device,
        tp: TPGroup = SINGLE,
    ) -> None:
        super().__init__()
        self.tp = tp
        self.gate = Router(hidden_size, moe, device)
        layout = layout_being_built()
        self.ep = layout.group if layout is not None else None
        self.placement = None
        if self.ep is not None:
            self.placement = ExpertPlacement.contiguous(
                moe.num_experts, self.ep.world_size, layout.extra_slots
            )
            self.dispatcher = ExpertDispatch(self.ep)
        self.experts = FusedExperts(
            hidden_size, moe, dtype, device, tp, self.placement, self.ep.rank if self.ep else 0
        )
        self.shared_experts = None
        if moe.shared_intermediate_size:
            self.shared_experts = GatedMLP(hidden_size, moe.shared_intermediate_size, dtype, device, tp)
        # Eager steps run this block from CUDA graphs captured per token count
        # (``engine.runner.moe_graphs``), once the runner has captured them.
        self.block_graphs = None
        self.register_buffer(
            "expert_token_counts",
            torch.zeros(moe.num_experts, dtype=torch.int64, device=device),
            persistent=False,
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.block_graphs is not None:
            out = self.block_graphs.run(self, x)
            if out is not None:
                return out
        return self.run(x)

    def run(self, x: torch.Tensor, counted_rows: torch.Tensor | None = None) -> torch.Tensor:
        """The block on ``x``; ``counted_rows`` (int tensor ``[1]``): the routing statistics count
        only the rows before it (the rest pad a CUDA graph's captured size)."""
        topk_weights, topk_ids = self.gate(x, self.expert_token_counts, counted_rows)
        if self.ep is not None:
            sent = self.dispatcher.dispatch(x, topk_weights, topk_ids, self.placement)
            shared = self._shared(x)  # while the rows travel
            out = self.dispatcher.combine(sent, self.experts.w13, self.experts.w2)
            return out if shared is None else out + shared
        out = fused_moe(x, self.experts.w13, self.experts.w2, topk_weights, topk_ids)
        shared = self._shared(x)
        if shared is not None:
            out = out + shared
        if self.tp.is_single:
            return out
        # Summed in fp32 and rounded once, as RowParallelLinear does (bf16 sums flip near-ties).
        return self.tp.all_reduce(out.float()).to(out.dtype)

    def _shared(self, x: torch.Tensor) -> torch.Tensor | None:
        """The shared experts' (tensor parallel: this rank's partial) product, or None."""
        if self.shared_experts is None:
            return None
        gate_up = self.shared_experts.gate_up_proj(x)
        down = self.shared_experts.down_proj
        if down.fuses_silu(gate_up):  # decode-sized: the activation folds into the GEMV
            return gemv_silu(gate_up, down.weight)
        return matmul(silu_and_mul(gate_up), down.weight)

    def shared_slots_possible(self) -> int:
        """How many expert slots the shared experts would fill if fused; 0 where they cannot be
        (none, tensor or expert parallel, a size that is not a multiple of the routed experts')."""
        if self.shared_experts is None or self.ep is not None or not self.tp.is_single:
            return 0
        inter, hidden = self.experts.w2.shape[2], self.experts.w2.shape[1]
        down = self.shared_experts.down_proj.weight
        shared = down.shape[1]
        if down.shape[0] != hidden or not down.is_floating_point() or shared % inter:
            return 0  # e.g. a CPU's 4-bit or column-major weights
        return shared // inter

    @torch.no_grad()
    def fuse_shared_experts(self) -> None:
        """Move the (loaded) shared experts into ``w13``/``w2`` as experts E, E + 1, ... and have the
        router append them to every token's choice at weight 1."""
        slots = self.shared_slots_possible()
        if not slots:
            raise ValueError("these shared experts cannot run as routed ones (see shared_slots_possible)")
        w13, w2 = self.experts.w13, self.experts.w2
        inter, hidden = w2.shape[2], w2.shape[1]
        gate_up = self.shared_experts.gate_up_proj.weight  # [gate rows; up rows], s*I each
        down = self.shared_experts.down_proj.weight  # [H, s*I]
        gate, up = gate_up.view(2, slots, inter, hidden).unbind(0)
        shared13 = torch.cat([gate, up], dim=1)  # [s, 2I, H]: each slice's gate rows, then its up rows
        shared2 = down.view(hidden, slots, inter).permute(1, 0, 2)  # [s, H, I]
        self.experts.w13 = nn.Parameter(torch.cat([w13, shared13.to(w13.dtype)]), requires_grad=False)
        self.experts.w2 = nn.Parameter(torch.cat([w2, shared2.to(w2.dtype)]), requires_grad=False)
        self.shared_experts = None
        self.gate.shared_slots = slots

    def apply_placement(self, placement: ExpertPlacement) -> None:
        """Expert parallel: move to ``placement`` (every rank calls it, between steps, with the same plan)."""
        w13, w2 = exchange_experts(self.ep, self.placement, placement, self.experts.w13, self.experts.w2)
        self.experts.replace(placement, self.ep.rank, w13, w2)
        self.placement = placement


def fuse_shared_experts(model: nn.Module) -> int:
    """After loading: fuse every MoE layer's shared experts that ``shared_experts_mode`` asks for
    (auto: where the Triton expert kernels run) and ``MoE.shared_slots_possible`` allows; returns how
    many layers were fused."""
    mode = shared_experts_switch.mode
    fused = 0
    for _, module in _moe_layers(model):
        if mode == "separate" or not module.shared_slots_possible():
            continue
        if mode == "fused" or use_triton(module.experts.w13):
            module.fuse_shared_experts()
            fused += 1
            device = module.experts.w13.device
    if fused and device.type == "cuda":
        # Each layer's old stacks are freed segments a size too small for the next layer's new ones:
        # cached, they would count as used when the KV pool is sized from the free memory.
        torch.cuda.empty_cache()
    return fused


def routing_statistics(model: nn.Module) -> dict[str, list[int]]:
    """Tokens routed to each expert so far, per MoE layer (keyed by the layer's module name); a
    host sync on an accelerator, so for a metrics scrape, not for every step."""
    return {name: module.expert_token_counts.tolist() for name, module in _moe_layers(model)}


def run_idle(model: nn.Module, hidden_size: int, dtype: torch.dtype, device: torch.device) -> None:
    """An expert-parallel rank with no tokens this step: every MoE layer, in order, on no rows, so
    the rank still serves the rows the others send to its experts."""
    empty = torch.empty((0, hidden_size), dtype=dtype, device=device)
    for _, module in _moe_layers(model):
        module(empty)


def moe_layers(model: nn.Module) -> list[tuple[str, MoE]]:
    return _moe_layers(model)


def reset_routing_statistics(model: nn.Module) -> None:
    for _, module in _moe_layers(model):
        module.expert_token_counts.zero_()


def _moe_layers(model: nn.Module) -> list[tuple[str, MoE]]:
    return [(name, module) for name, module in model.named_modules() if isinstance(module, MoE)]
