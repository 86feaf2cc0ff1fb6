"""The expert-parallel load balancer, as each rank runs it between steps.

Every ``interval_steps`` steps the executor tells every rank to rebalance (``tp_messages.REBALANCE``).
Each rank all-reduces its routing counts (so all ranks see the same exact integers), adds what was
routed since the last time to each MoE layer's sliding window, plans a placement from the window
(``plan_placement``: copies of hot experts in the extra slots, then the heaviest experts packed first)
and, where the plan differs, moves experts between ranks (``MoE.apply_placement``). The plan is a
pure function of the all-reduced counts, so every rank reaches the same plan without exchanging it;
no request is dropped: the move happens between two steps.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from engine.distributed.expert_placement import ExpertPlacement, RoutingWindow, plan_placement
from engine.distributed.group import TPGroup
from engine.layers import moe

# A plan must cut the imbalance ratio (max / mean tokens per rank) by this much to be applied.
MIN_GAIN = 0.05


@dataclass(frozen=True)
class ExpertBalancerSettings:
    interval_steps: int
    window_steps: int
    extra_slots: int

    @classmethod
    def of(cls, config) -> ExpertBalancerSettings | None:
        """From an ``EngineConfig``; None when the balancer is off."""
        if config.expert_parallel_size == 1 or not config.eplb_interval_steps:
            return None
        return cls(config.eplb_interval_steps, config.eplb_window_steps, config.eplb_extra_slots)

    @property
    def window_entries(self) -> int:
        """One window entry per rebalance: the counts of ``interval_steps`` steps."""
        return max(1, -(-self.window_steps // self.interval_steps))


@dataclass
class LayerReport:
    """What the last rebalance saw and did for one MoE layer (rank 0 exports it as metrics)."""

    expert_load: list[int]
    rank_load_before: list[float]
    rank_load_after: list[float]
    imbalance_before: float
    imbalance_after: float
    moved: bool
    moves: int  # plans applied to this layer so far
    imbalance_contiguous: float  # what the plain contiguous split (no balancer) would give this load

    def as_dict(self) -> dict:
        return dict(self.__dict__)


class ExpertBalancer:
    def __init__(self, model: torch.nn.Module, group: TPGroup, settings: ExpertBalancerSettings) -> None:
        self.model = model
        self.group = group
        self.settings = settings
        self.layers = moe.moe_layers(model)
        self._windows = {
            name: RoutingWindow(layer.experts.num_experts, settings.window_entries)
            for name, layer in self.layers
        }
        self._seen: torch.Tensor | None = None  # all-reduced cumulative counts at the last rebalance
        self.report: dict[str, LayerReport] = {}
        self._moves: dict[str, int] = {}

    def rebalance(self) -> dict[str, LayerReport]:
        if not self.layers:
            return {}
        counts = torch.stack([layer.expert_token_counts for _, layer in self.layers]).clone()
        counts = self.group.all_reduce_counts(counts).cpu()
        delta = counts if self._seen is None else counts - self._seen
        if (delta < 0).any():  # the counts were reset since (engine start-up does)
            delta = counts
        self._seen = counts
        for (name, layer), routed in zip(self.layers, delta, strict=True):
            window = self._windows[name]
            window.add(routed.tolist())
            load = window.load()
            before = layer.placement
            plan = plan_placement(
                load, before.num_ranks, before.slots_per_rank - before.num_experts // before.num_ranks
            )
            # Replanned from scratch, a plan differs with any change in load: move only for a real gain.
            moved = plan != before and plan.imbalance_ratio(load) < before.imbalance_ratio(load) - MIN_GAIN
            if moved:
                layer.apply_placement(plan)
            self.report[name] = LayerReport(
                load,
                before.rank_loads(load),
                plan.rank_loads(load),
                before.imbalance_ratio(load),
                plan.imbalance_ratio(load),
                moved,
                self._moves.get(name, 0) + moved,
                ExpertPlacement.contiguous(before.num_experts, before.num_ranks).imbalance_ratio(load),
            )
            self._moves[name] = self.report[name].moves
            if not moved:
                self.report[name].rank_load_after = self.report[name].rank_load_before
                self.report[name].imbalance_after = self.report[name].imbalance_before
        return self.report
