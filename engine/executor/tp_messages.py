"""What rank 0 sends the other tensor-parallel ranks each step: only what the forward pass reads.

Requests travel as ids plus this step's tokens and block table, never their full token history or
sampling state (ranks > 0 do not sample), so a message stays small however long the contexts are.
"""

from __future__ import annotations

from engine.scheduler.output import ScheduledRequest, SchedulerOutput
from engine.scheduler.request import Request

ALLOCATE = "allocate"  # (num_blocks, num_window_blocks)
CAPTURE = "capture"  # (max_batch, eager)
STEP = "step"  # (dropped request ids, packed step, share_samples)
STOP = "stop"  # ()
ROUTING = "routing"  # (): expert parallel: all-reduce the routing counts (rank 0 keeps the sum)
RESET_ROUTING = "reset_routing"  # ()
REBALANCE = "rebalance"  # (): expert parallel: the load balancer plans and moves experts

JOINING = "joining"  # rank > 0 is about to join the process group
READY = "ready"  # rank > 0 loaded its shard
FAILED = "failed"  # (traceback text,): rank > 0 is exiting because of this error


def pack_step(out: SchedulerOutput) -> tuple:
    return (
        [
            (
                s.request.request_id,
                s.start,
                s.num_tokens,
                s.block_ids,
                s.token_ids,
                s.samples,
                s.pending_token,
                s.num_draft_tokens,  # every rank computes the logits of the draft positions
                (s.block_base, s.window_block_ids, s.window_base, s.reused_until),
            )
            for s in out.scheduled
        ],
        out.preempted_ids,
    )


def unpack_step(packed: tuple) -> SchedulerOutput:
    scheduled, preempted = packed
    return SchedulerOutput(
        scheduled=[
            ScheduledRequest(
                request=Request(request_id=rid, prompt_token_ids=[], max_tokens=0, num_computed_tokens=start),
                start=start,
                num_tokens=num_tokens,
                block_ids=block_ids,
                token_ids=token_ids,
                samples=samples,
                pending_token=pending,  # fed from rank 0's samples, broadcast on the devices
                num_draft_tokens=num_draft,
                block_base=groups[0],
                window_block_ids=groups[1],
                window_base=groups[2],
                reused_until=groups[3],
            )
            for rid, start, num_tokens, block_ids, token_ids, samples, pending, num_draft, groups in scheduled
        ],
        preempted_ids=list(preempted),
    )
