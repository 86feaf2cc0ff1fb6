"""Expert parallelism: the routed experts of every MoE layer are split over a replica's ranks, each
rank runs attention for its own requests (data parallel), and tokens travel to their experts' ranks
and back with two all-to-alls per layer (``torch.distributed``: gloo on CPU, NCCL on CUDA).

Which rank and slot holds which expert is an ``ExpertPlacement`` (``expert_placement.py``): contiguous
shares at first, then whatever the load balancer plans. ``ExpertDispatch`` moves one layer's tokens:
``dispatch`` starts sending each (token, expert) pair's row to the rank holding that expert, and
returns while the rows travel (the shared experts run meanwhile); ``combine`` runs this rank's experts
on the rows it received, sends the outputs back and sums each token's weighted outputs in slot order,
in fp32, as the single-rank ``fused_moe`` does.

A rank with no tokens in a step still calls every layer (``engine.layers.moe.run_idle``): the others
send it rows for its experts and wait for its answers.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch

from engine.distributed.group import TPGroup


@dataclass(frozen=True)
class ExpertParallelLayout:
    group: TPGroup
    extra_slots: int = 0  # expert slots per rank beyond its share (copies of hot experts)


# The expert-parallel layout of the model being built (one per process), read by each MoE layer's
# constructor: the model classes pass only the tensor-parallel group down.
_building: ExpertParallelLayout | None = None


@contextmanager
def building_expert_parallel(layout: ExpertParallelLayout | None) -> Iterator[None]:
    global _building
    previous = _building
    _building = layout if layout is not None and not layout.group.is_single else None
    try:
        yield
    finally:
        _building = previous


def layout_being_built() -> ExpertParallelLayout | None:
    return _building


def all_to_all(x: torch.Tensor, send_counts: list[int], recv_counts: list[int], async_op: bool = False):
    """Rows ``x[sum(send[:j]) : sum(send[:j+1])]`` go to rank j; returns (received rows in rank order,
    the pending work or None)."""
    import torch.distributed as dist

    out = torch.empty((sum(recv_counts), *x.shape[1:]), dtype=x.dtype, device=x.device)
    work = dist.all_to_all_single(
        out, x.contiguous(), output_split_sizes=recv_counts, input_split_sizes=send_counts, async_op=async_op
    )
    return out, work


@dataclass
class Dispatched:
    """One layer's pairs on their way: what ``combine`` needs to run them and bring them back."""

    tokens: int
    top_k: int
    order: torch.Tensor  # pair index (token * k + slot) of each sent row, grouped by destination rank
    weights: torch.Tensor  # fp32 [T*k], the router's weight of each pair
    send_counts: list[int]
    recv_counts: list[int]
    rows: torch.Tensor  # received rows (valid once the work is done)
    slots: torch.Tensor  # received rows' local expert slots
    work: list


class ExpertDispatch:
    def __init__(self, group: TPGroup) -> None:
        self.group = group

    def dispatch(
        self, x: torch.Tensor, topk_weights: torch.Tensor, topk_ids: torch.Tensor, placement
    ) -> Dispatched:
        tokens, top_k = topk_ids.shape
        dest_rank, dest_slot = placement.route(topk_ids)
        flat_rank = dest_rank.reshape(-1)
        order = torch.argsort(flat_rank, stable=True)
        send = torch.bincount(flat_rank, minlength=self.group.world_size)
        recv = torch.empty_like(send)
        import torch.distributed as dist

        dist.all_to_all_single(recv, send)  # each rank learns how many rows it will receive
        send_counts, recv_counts = send.tolist(), recv.tolist()
        rows, rows_work = all_to_all(
            x.index_select(0, order // top_k), send_counts, recv_counts, async_op=True
        )
        slots, slots_work = all_to_all(
            dest_slot.reshape(-1).index_select(0, order), send_counts, recv_counts, True
        )
        return Dispatched(
            tokens,
            top_k,
            order,
            topk_weights.reshape(-1),
            send_counts,
            recv_counts,
            rows,
            slots,
            [rows_work, slots_work],
        )

    def combine(self, d: Dispatched, w13: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
        from kernels.fused_moe import _combine, fused_moe

        for work in d.work:
            work.wait()
        if d.rows.shape[0]:
            ones = torch.ones((d.rows.shape[0], 1), dtype=torch.float32, device=d.rows.device)
            out = fused_moe(d.rows, w13, w2, ones, d.slots[:, None])
        else:
            out = d.rows.new_empty((0, w2.shape[1]))
        back, _ = all_to_all(out, d.recv_counts, d.send_counts)
        hidden = w2.shape[1]
        pair_out = torch.zeros(d.tokens * d.top_k, hidden, dtype=torch.float32, device=back.device)
        pair_out.index_copy_(0, d.order, back.float() * d.weights.index_select(0, d.order)[:, None])
        return _combine(pair_out, d.tokens, d.top_k, back.dtype)


def exchange_experts(
    group: TPGroup, old, new, w13: torch.Tensor, w2: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """This rank's expert weights under placement ``new``, from the ranks that hold them under
    ``old``: every expert a rank newly needs is broadcast by the first rank that has it (every rank
    takes part in each broadcast, in expert order, so all agree without a plan exchange)."""
    import torch.distributed as dist

    rank = group.rank
    held = {e: s for s, e in enumerate(old.slots[rank])}
    new_w13 = w13.new_empty((new.slots_per_rank, *w13.shape[1:]))
    new_w2 = w2.new_empty((new.slots_per_rank, *w2.shape[1:]))
    wanted = {e for r in range(new.num_ranks) for e in new.slots[r] if e not in old.slots[r]}
    received: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
    for expert in sorted(wanted):
        source = old.replicas(expert)[0][0]
        if rank == source:
            a, b = w13[held[expert]].clone(), w2[held[expert]].clone()
        else:
            a, b = torch.empty_like(w13[0]), torch.empty_like(w2[0])
        dist.broadcast(a, src=source)
        dist.broadcast(b, src=source)
        received[expert] = (a, b)
    for slot, expert in enumerate(new.slots[rank]):
        if expert in held:
            new_w13[slot].copy_(w13[held[expert]])
            new_w2[slot].copy_(w2[held[expert]])
        else:
            new_w13[slot].copy_(received[expert][0])
            new_w2[slot].copy_(received[expert][1])
    return new_w13, new_w2
