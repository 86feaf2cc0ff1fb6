"""Where each MoE expert lives under expert parallelism, and the load balancer's planner (issue 23).

A placement gives every rank the same number of physical expert slots, ``num_experts // num_ranks``
plus ``extra_slots`` for copies of hot experts. ``plan_placement`` fills them from routing statistics
the way DeepSeek's EPLB does: replicate the hottest experts, then pack the copies heaviest first.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property

import torch


def _slots_per_rank(num_experts: int, num_ranks: int, extra_slots: int) -> int:
    if num_ranks < 1:
        raise ValueError(f"num_ranks must be 1 or more, got {num_ranks}")
    if extra_slots < 0:
        raise ValueError(f"extra_slots must be 0 or more, got {extra_slots}")
    if num_experts < 1 or num_experts % num_ranks:
        raise ValueError(f"num_experts={num_experts} is not divisible by num_ranks={num_ranks}")
    slots = num_experts // num_ranks + extra_slots
    if slots > num_experts:
        raise ValueError(
            f"{slots} slots per rank exceed the {num_experts} experts (a rank holds each expert once at most)"
        )
    return slots


@dataclass(frozen=True)
class ExpertPlacement:
    num_experts: int
    slots: tuple[tuple[int, ...], ...]  # rank -> the global expert id in each of its slots

    def __post_init__(self) -> None:
        object.__setattr__(self, "slots", tuple(tuple(int(e) for e in rank) for rank in self.slots))
        if not self.slots:
            raise ValueError("a placement needs at least one rank")
        sizes = [len(rank) for rank in self.slots]
        if len(set(sizes)) != 1:
            raise ValueError(f"every rank must hold the same number of slots, got {sizes}")
        for r, rank in enumerate(self.slots):
            for e in rank:
                if not 0 <= e < self.num_experts:
                    raise ValueError(f"rank {r} holds expert {e}, outside 0..{self.num_experts - 1}")
            if len(set(rank)) != len(rank):
                twice = sorted({e for e in rank if rank.count(e) > 1})
                raise ValueError(f"rank {r} holds expert(s) {twice} more than once")
        missing = sorted(set(range(self.num_experts)) - {e for rank in self.slots for e in rank})
        if missing:
            raise ValueError(f"expert(s) {missing} are on no rank")

    @property
    def num_ranks(self) -> int:
        return len(self.slots)

    @property
    def slots_per_rank(self) -> int:
        return len(self.slots[0])

    @classmethod
    def contiguous(cls, num_experts: int, num_ranks: int, extra_slots: int = 0) -> ExpertPlacement:
        """Rank r holds the ``slots_per_rank`` experts from ``r * E/N`` on, wrapping past the last expert.

        Its first E/N slots are its own share; the extra slots copy the first experts of the next ranks,
        so with extra_slots=1 every rank's first expert has two copies.
        """
        slots = _slots_per_rank(num_experts, num_ranks, extra_slots)
        share = num_experts // num_ranks
        return cls(
            num_experts,
            tuple(tuple((r * share + s) % num_experts for s in range(slots)) for r in range(num_ranks)),
        )

    def replicas(self, expert: int) -> list[tuple[int, int]]:
        """(rank, slot) of each copy of ``expert``, in rank order."""
        return [(r, rank.index(expert)) for r, rank in enumerate(self.slots) if expert in rank]

    @cached_property
    def _tables(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``copy_rank [E, max copies]``, ``copy_slot [E, max copies]``, ``num_copies [E]``, on the CPU."""
        replicas = [self.replicas(e) for e in range(self.num_experts)]
        width = max(len(copies) for copies in replicas)
        copy_rank = torch.zeros(self.num_experts, width, dtype=torch.int64)
        copy_slot = torch.zeros(self.num_experts, width, dtype=torch.int64)
        for e, copies in enumerate(replicas):
            for c, (r, s) in enumerate(copies):
                copy_rank[e, c], copy_slot[e, c] = r, s
        return copy_rank, copy_slot, torch.tensor([len(c) for c in replicas], dtype=torch.int64)

    @cached_property
    def _tables_by_device(self) -> dict[torch.device, tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
        return {}

    def route(self, topk_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Global expert ids ``[T, k]`` -> ``(rank [T, k], slot [T, k])``, int64 on topk_ids' device.

        The n-th pair that picks expert e, counting pairs in (token, k) order, goes to e's copy
        ``n % copies(e)`` (copies in rank order), so each copy of a hot expert gets its pairs to within one.
        """
        tables = self._tables_by_device.get(topk_ids.device)
        if tables is None:
            tables = tuple(t.to(topk_ids.device) for t in self._tables)
            self._tables_by_device[topk_ids.device] = tables
        copy_rank, copy_slot, num_copies = tables
        flat = topk_ids.reshape(-1).long()
        order = torch.argsort(flat, stable=True)
        grouped = flat[order]
        # Each pair's place in its expert's run of the sorted ids (searchsorted, unlike bincount, needs no
        # host sync).
        run_start = torch.searchsorted(grouped, grouped)
        occurrence = torch.empty_like(flat)
        occurrence[order] = torch.arange(flat.numel(), device=flat.device) - run_start
        copy = occurrence % num_copies[flat]
        shape = topk_ids.shape
        return copy_rank[flat, copy].reshape(shape), copy_slot[flat, copy].reshape(shape)

    def rank_loads(self, expert_load: Sequence[float]) -> list[float]:
        """Tokens each rank processes when each expert's load is split evenly over its copies."""
        if len(expert_load) != self.num_experts:
            raise ValueError(f"expected {self.num_experts} expert loads, got {len(expert_load)}")
        copies = [0] * self.num_experts
        for rank in self.slots:
            for e in rank:
                copies[e] += 1
        return [sum(float(expert_load[e]) / copies[e] for e in rank) for rank in self.slots]

    def imbalance_ratio(self, expert_load: Sequence[float]) -> float:
        """Busiest rank's load over the mean rank load; 1.0 when there is no load."""
        loads = self.rank_loads(expert_load)
        total = sum(loads)
        return max(loads) * len(loads) / total if total > 0 else 1.0

    def to_json(self) -> dict:
        return {"num_experts": self.num_experts, "slots": [list(rank) for rank in self.slots]}

    @classmethod
    def from_json(cls, data: Mapping) -> ExpertPlacement:
        return cls(int(data["num_experts"]), tuple(tuple(rank) for rank in data["slots"]))


def plan_placement(expert_load: Sequence[float], num_ranks: int, extra_slots: int) -> ExpertPlacement:
    """EPLB-style placement for one MoE layer from each expert's recent load (tokens routed to it).

    First the ``num_ranks * extra_slots`` spare copies go, one at a time, to the expert with the most
    load per copy (at most one copy per rank). Then the copies, each weighing its expert's load over its
    copy count, are packed heaviest first, each onto the least-loaded rank that has a free slot and
    lacks that expert. Ties go to fewer copies / fewer filled slots, then the lower expert id / rank.
    Each rank lists its experts in id order.
    """
    num_experts = len(expert_load)
    slots = _slots_per_rank(num_experts, num_ranks, extra_slots)
    load = [float(x) for x in expert_load]
    if any(x < 0 for x in load):
        raise ValueError("expert loads must be 0 or more")

    copies = [1] * num_experts
    for _ in range(num_ranks * extra_slots):
        e = max(
            (e for e in range(num_experts) if copies[e] < num_ranks),
            key=lambda e: (load[e] / copies[e], -copies[e], -e),
        )
        copies[e] += 1

    weight = [load[e] / copies[e] for e in range(num_experts)]
    items = sorted((e for e in range(num_experts) for _ in range(copies[e])), key=lambda e: (-weight[e], e))
    held: list[list[int]] = [[] for _ in range(num_ranks)]
    rank_load = [0.0] * num_ranks
    for e in items:
        fits = [r for r in range(num_ranks) if len(held[r]) < slots and e not in held[r]]
        if fits:
            r = min(fits, key=lambda r: (rank_load[r], len(held[r]), r))
        else:
            r = _make_room(held, rank_load, weight, e)
        held[r].append(e)
        rank_load[r] += weight[e]
    return ExpertPlacement(num_experts, tuple(tuple(sorted(rank)) for rank in held))


def _make_room(held: list[list[int]], rank_load: list[float], weight: list[float], e: int) -> int:
    """Every rank with a free slot already holds ``e``: move another expert off a full rank that lacks
    ``e`` onto one with room, and return the full rank. 600,000 random trials never got here, but the
    packing does not rule it out.

    Such a full rank exists because e has fewer copies placed than ranks; it holds more experts than the
    rank with room, which holds e, so at least two of them are missing there.
    """
    roomy = min(range(len(held)), key=lambda r: len(held[r]))
    full = next(r for r in range(len(held)) if e not in held[r])
    moved = next(x for x in held[full] if x not in held[roomy])
    held[full].remove(moved)
    held[roomy].append(moved)
    rank_load[full] -= weight[moved]
    rank_load[roomy] += weight[moved]
    return full


class RoutingWindow:
    """Per-expert routing counts of one MoE layer over its last ``window_steps`` steps."""

    def __init__(self, num_experts: int, window_steps: int) -> None:
        if num_experts < 1 or window_steps < 1:
            raise ValueError(
                f"num_experts and window_steps must be 1 or more, got {num_experts}, {window_steps}"
            )
        self.num_experts = num_experts
        self.window_steps = window_steps
        self._steps: deque[torch.Tensor] = deque()
        self._sum = torch.zeros(num_experts, dtype=torch.int64)

    @property
    def steps(self) -> int:
        """Steps in the window now (at most window_steps)."""
        return len(self._steps)

    def add(self, counts: Sequence[int] | torch.Tensor) -> None:
        """One step's tokens per expert."""
        step = torch.as_tensor(counts, dtype=torch.int64).to("cpu", copy=True)
        if step.shape != (self.num_experts,):
            raise ValueError(f"expected {self.num_experts} counts, got shape {tuple(step.shape)}")
        if (step < 0).any():
            raise ValueError("routing counts must be 0 or more")
        self._steps.append(step)
        self._sum += step
        if len(self._steps) > self.window_steps:
            self._sum -= self._steps.popleft()

    def load(self) -> list[int]:
        return self._sum.tolist()
