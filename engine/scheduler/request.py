"""A request as the scheduler sees it: tokens so far, how many have KV computed, and its status."""

from __future__ import annotations

import enum
import time
from dataclasses import dataclass, field
from typing import Any


class RequestStatus(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    PREEMPTED = "preempted"
    FINISHED_STOPPED = "finished_stopped"
    FINISHED_LENGTH = "finished_length"
    FINISHED_ABORTED = "finished_aborted"

    @property
    def finished(self) -> bool:
        # Identity tests: a frozenset lookup would call Enum.__hash__ (Python code) every step.
        return (
            self is RequestStatus.FINISHED_STOPPED
            or self is RequestStatus.FINISHED_LENGTH
            or self is RequestStatus.FINISHED_ABORTED
        )

    @property
    def finish_reason(self) -> str | None:
        return _FINISH_REASONS.get(self)


FINISHED_STATES = frozenset(
    {RequestStatus.FINISHED_STOPPED, RequestStatus.FINISHED_LENGTH, RequestStatus.FINISHED_ABORTED}
)
_FINISH_REASONS = {
    RequestStatus.FINISHED_STOPPED: "stop",
    RequestStatus.FINISHED_LENGTH: "length",
    RequestStatus.FINISHED_ABORTED: "abort",
}


@dataclass(eq=False)  # identity: `request in running` must not compare token lists field by field
class Request:
    request_id: str
    prompt_token_ids: list[int]
    max_tokens: int  # already capped by max_model_len - prompt length
    eos_token_ids: frozenset[int] = frozenset()
    stop_token_ids: frozenset[int] = frozenset()
    ignore_eos: bool = False
    min_tokens: int = 0
    cache_salt: str | None = None
    sampling_params: Any = None  # opaque to the scheduler; the runner reads it
    arrival_time: float = field(default_factory=time.monotonic)
    output_token_ids: list[int] = field(default_factory=list)
    num_computed_tokens: int = 0
    num_cached_tokens: int = -1  # prefix-cache hit at first scheduling; -1 until scheduled
    status: RequestStatus = RequestStatus.WAITING
    stop_reason: int | str | None = None
    first_scheduled_time: float | None = None
    num_preemptions: int = 0
    # Async scheduling: tokens sampled on the device whose ids the host has not read yet. The
    # scheduler counts them as known tokens (a decode step feeds the device-side id directly).
    num_output_placeholders: int = 0
    # Speculative decoding: the draft proposed for the next step (engine/spec/), consumed when the
    # step is scheduled; never part of all_token_ids until verified.
    draft_token_ids: list[int] = field(default_factory=list)
    # Structured output (engine/structured/): the request's grammar; it runs once ``grammar.ready``.
    grammar: Any = None

    def __post_init__(self) -> None:
        # Prompt + output in one list grown in place, so per-step work never copies the history.
        self._all_token_ids = list(self.prompt_token_ids) + list(self.output_token_ids)

    @property
    def all_token_ids(self) -> list[int]:
        """Prompt and output tokens known on the host; a live list: read it, never mutate it."""
        return self._all_token_ids

    @property
    def num_tokens(self) -> int:
        """Tokens known on the host (placeholders not included)."""
        return len(self._all_token_ids)

    @property
    def num_prompt_tokens(self) -> int:
        return len(self.prompt_token_ids)

    def append_output_token(self, token_id: int) -> None:
        self.output_token_ids.append(token_id)
        self._all_token_ids.append(token_id)

    def drop_last_output_tokens(self, n: int) -> None:
        """Forget the last ``n`` output tokens (a stop string ended the request before them)."""
        if n > 0:
            del self.output_token_ids[-n:]
            del self._all_token_ids[-n:]

    def check_token_stop(self) -> RequestStatus | None:
        """Stop conditions that need only token ids (stop strings are the detokenizer's job)."""
        last = self.output_token_ids[-1]
        n = len(self.output_token_ids)
        if n >= self.min_tokens:
            if not self.ignore_eos and last in self.eos_token_ids:
                return RequestStatus.FINISHED_STOPPED
            if last in self.stop_token_ids:
                self.stop_reason = last
                return RequestStatus.FINISHED_STOPPED
        if n >= self.max_tokens:
            return RequestStatus.FINISHED_LENGTH
        return None
