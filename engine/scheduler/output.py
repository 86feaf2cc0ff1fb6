"""What one scheduling step decided, as typed data for the model runner."""

from __future__ import annotations

from dataclasses import dataclass, field

from engine.scheduler.request import Request


@dataclass
class ScheduledRequest:
    request: Request
    start: int  # position of the first token fed this step (= num_computed_tokens before the step)
    num_tokens: int  # tokens fed this step
    block_ids: list[int]
    token_ids: list[int]
    # A token is sampled only when this step reaches the end of the known tokens (not mid-prefill).
    samples: bool
    # The last fed token is the one the previous step sampled, still on the device (async scheduling).
    pending_token: bool = False
    # Speculative decoding: the last this many fed tokens are a draft (token_ids ends with it); the
    # step samples at every draft position and the one before, and keeps the verified prefix.
    num_draft_tokens: int = 0
    # Filled by Scheduler.update_from_output: the tokens this step appended to the request.
    emitted: list[int] = field(default_factory=list)
    # KV groups (engine/kv/layout.py): block_ids[0] is the request's block ``block_base`` (not 0
    # where every layer keeps only its window); a window group beside full-attention layers has its
    # own held run from ``window_base``; positions below ``reused_until`` (a prefix hit being
    # replayed for the windowed layers) already hold the main group's KV and are not written there.
    block_base: int = 0
    window_block_ids: list[int] | None = None
    window_base: int = 0
    reused_until: int = 0

    @property
    def draft_token_ids(self) -> list[int]:
        return self.token_ids[len(self.token_ids) - self.num_draft_tokens :]


@dataclass
class SchedulerOutput:
    scheduled: list[ScheduledRequest] = field(default_factory=list)
    preempted_ids: list[str] = field(default_factory=list)

    @property
    def total_num_tokens(self) -> int:
        return sum(s.num_tokens for s in self.scheduled)

    @property
    def is_empty(self) -> bool:
        return not self.scheduled

    @property
    def num_draft_tokens(self) -> int:
        return sum(s.num_draft_tokens for s in self.scheduled)
