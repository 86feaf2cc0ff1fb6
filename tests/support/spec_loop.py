"""A speculator driven as ``EngineCore._step_overlapped`` drives it under async scheduling, without an
engine: decode-only requests, step times from given functions, acceptance by a seeded coin.

Each step asks ``wants_drafts``; on yes the step in flight is read first, ``propose`` runs and the
step is verified synchronously (or, without drafts, launched as a plain one); on no a plain step is
launched and the one in flight read. Plain steps reach ``observe`` when read, as in the engine.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from types import SimpleNamespace

from engine.scheduler.request import RequestStatus
from engine.spec.speculator import Speculator


@dataclass
class DecodingRequest:
    """What the speculator reads of a request in decode."""

    request_id: str
    num_tokens: int = 64
    num_computed_tokens: int = 63
    num_output_placeholders: int = 0
    status: RequestStatus = RequestStatus.RUNNING
    sampling_params: SimpleNamespace = field(default_factory=lambda: SimpleNamespace(logprobs=None))
    draft_token_ids: list[int] = field(default_factory=list)
    max_tokens: int = 1 << 30
    output_token_ids: list[int] = field(default_factory=list)


def decoding_requests(n: int) -> list[DecodingRequest]:
    return [DecodingRequest(f"r{i}") for i in range(n)]


@dataclass
class LoopCounts:
    steps: int = 0
    drafting_steps: int = 0  # wants_drafts said yes: the step ran synchronously
    steps_without_drafts: int = 0  # of those, the ones where no request got a draft
    verify_steps: int = 0
    plain_steps: int = 0


def step_output(running, drafts: dict[str, int]) -> SimpleNamespace:
    """A decode step's ``SchedulerOutput`` as ``Speculator.observe`` reads it."""
    scheduled = [
        SimpleNamespace(
            request=r,
            num_tokens=1 + drafts.get(r.request_id, 0),
            num_draft_tokens=drafts.get(r.request_id, 0),
        )
        for r in running
    ]
    return SimpleNamespace(
        scheduled=scheduled,
        total_num_tokens=sum(s.num_tokens for s in scheduled),
        num_draft_tokens=sum(drafts.values()),
    )


class AsyncLoop:
    """``plain_seconds(rows)`` and ``verify_seconds(tokens)`` price the steps; ``acceptance`` is each
    draft position's chance of being kept, up to the first rejection."""

    def __init__(
        self, speculator: Speculator, running, plain_seconds, verify_seconds, acceptance: float, seed=0
    ):
        self.speculator = speculator
        self.running = running
        self.plain_seconds = plain_seconds
        self.verify_seconds = verify_seconds
        self.acceptance = acceptance
        self.rng = random.Random(seed)
        self.pending = None
        self.counts = LoopCounts()

    def step(self) -> None:
        spec, counts = self.speculator, self.counts
        counts.steps += 1
        if spec is not None and spec.wants_drafts(self.running):
            counts.drafting_steps += 1
            self._read_pending()
            spec.propose(self.running)
            drafts = {r.request_id: len(r.draft_token_ids) for r in self.running if r.draft_token_ids}
            if drafts:
                self._verify(drafts)
                return
            counts.steps_without_drafts += 1
            self._launch_plain()
            return
        previous, self.pending = self.pending, None
        self._launch_plain()
        if previous is not None:
            self._read(previous)

    def run(self, steps: int) -> LoopCounts:
        for _ in range(steps):
            self.step()
        self._read_pending()
        return self.counts

    def _launch_plain(self) -> None:
        for r in self.running:
            r.num_computed_tokens += 1
            r.num_output_placeholders += 1
        self.pending = step_output(self.running, {})

    def _read_pending(self) -> None:
        if self.pending is not None:
            pending, self.pending = self.pending, None
            self._read(pending)

    def _read(self, out) -> None:
        self.counts.plain_steps += 1
        if self.speculator is not None:
            self.speculator.observe(out, {}, self.plain_seconds(out.total_num_tokens))
        for s in out.scheduled:
            s.request.num_output_placeholders -= 1
            s.request.num_tokens += 1

    def _verify(self, drafts: dict[str, int]) -> None:
        self.counts.verify_steps += 1
        out = step_output(self.running, drafts)
        accepted = {}
        for rid, n in drafts.items():
            kept = 0
            while kept < n and self.rng.random() < self.acceptance:
                kept += 1
            accepted[rid] = list(range(kept))
        self.speculator.observe(out, accepted, self.verify_seconds(out.total_num_tokens))
        for r in self.running:
            emitted = 1 + len(accepted.get(r.request_id, ()))
            r.num_tokens += emitted
            r.num_computed_tokens += emitted
            r.draft_token_ids = []
