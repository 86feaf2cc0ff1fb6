"""Continuous batching, vLLM v1 style: no prefill/decode phases.

Every request has ``num_computed_tokens`` against ``num_tokens``; each step gives running requests
their missing tokens first (decodes and unfinished prefill chunks), then admits waiting requests,
all under one token budget, so prefill chunks and decodes share a step. When the KV pool runs dry
the most recently admitted running request is preempted (its blocks freed, to be recomputed later).
With ``admission_batch`` above 1, a full engine gathers the seats that free up and admits prompts
together (see ``_defers_admission``).
Pure Python: no torch.
"""

from __future__ import annotations

import time
from collections import deque

from engine.kv.kv_manager import KVCacheManager
from engine.scheduler.output import ScheduledRequest, SchedulerOutput
from engine.scheduler.request import Request, RequestStatus


class Scheduler:
    def __init__(
        self, kv: KVCacheManager, max_num_batched_tokens: int, max_num_seqs: int, admission_batch: int = 1
    ) -> None:
        self.kv = kv
        self.max_num_batched_tokens = max_num_batched_tokens
        self.max_num_seqs = max_num_seqs
        self.admission_batch = admission_batch
        self._deferred_steps = 0  # steps in a row a free seat was held back
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.requests: dict[str, Request] = {}
        self.num_preemptions = 0

    @property
    def num_unfinished(self) -> int:
        return len(self.waiting) + len(self.running)

    def add_request(self, request: Request) -> None:
        if request.request_id in self.requests:
            raise ValueError(f"request id {request.request_id!r} is already in use")
        self.requests[request.request_id] = request
        self.waiting.append(request)

    def schedule(self) -> SchedulerOutput:
        out = SchedulerOutput()
        budget = self.max_num_batched_tokens

        i = 0
        while i < len(self.running) and budget > 0:
            request = self.running[i]
            pending = request.num_output_placeholders
            if pending and len(request.output_token_ids) + pending >= request.max_tokens:
                i += 1  # the token still on the device ends it by length: no step past it
                continue
            num_new = min(request.num_tokens + pending - request.num_computed_tokens, budget)
            if num_new <= 0:
                i += 1
                continue
            num_draft = self._draft_room(request, num_new, budget)
            if num_draft and not self.kv.allocate_slots(
                request, request.num_computed_tokens, num_new + num_draft
            ):
                num_draft = 0  # no room for the draft: verify nothing rather than preempt for it
            while not num_draft and not self.kv.allocate_slots(request, request.num_computed_tokens, num_new):
                victim = self.running.pop(self._victim_index(request, i))
                self._preempt(victim)
                out.preempted_ids.append(victim.request_id)
                if victim is request:
                    break
            else:
                out.scheduled.append(self._scheduled(request, num_new, num_draft))
                budget -= num_new + num_draft
                i += 1
            request.draft_token_ids = []

        # Admitting new work in a step that had to preempt would only thrash.
        admitting = not out.preempted_ids and not self._defers_admission(out)
        while admitting and self.waiting and budget > 0 and len(self.running) < self.max_num_seqs:
            request = self._next_admissible()
            if request is None or request.num_output_placeholders:  # preempted with a token on the device
                break
            hit = self.kv.find_cached_prefix(request)
            num_new = min(request.num_tokens - hit.num_tokens, budget)
            if not self.kv.allocate_slots(request, hit.num_tokens, num_new, hit):
                break
            self.waiting.remove(request)
            request.num_computed_tokens = hit.num_tokens
            if request.num_cached_tokens < 0:
                request.num_cached_tokens = hit.num_tokens
            if request.first_scheduled_time is None:
                request.first_scheduled_time = time.monotonic()
            request.status = RequestStatus.RUNNING
            self.running.append(request)
            out.scheduled.append(self._scheduled(request, num_new))
            budget -= num_new

        for s in out.scheduled:
            s.request.num_computed_tokens += s.num_tokens  # drafts included: rolled back once verified
            if s.samples:
                s.request.num_output_placeholders += 1  # resolved by update_from_output
        return out

    def update_from_output(
        self, out: SchedulerOutput, sampled: dict[str, int], accepted: dict[str, list[int]] | None = None
    ) -> list[Request]:
        """Append sampled tokens; returns requests that finished on a token-level stop condition.

        ``accepted``: per speculating request, the verified draft tokens that precede its sampled
        one. The KV of the rejected rest is rolled back: ``num_computed_tokens`` steps back and the
        blocks past the verified tokens return to the pool (the prefix cache only ever hashed
        verified tokens). Each scheduled request's ``emitted`` lists what was appended."""
        finished = []
        for s in out.scheduled:
            request = s.request
            if not s.samples or request.status.finished:
                continue
            request.num_output_placeholders -= 1
            token_id = sampled.get(request.request_id)
            if token_id is None:
                continue
            tokens = [token_id]
            if s.num_draft_tokens:
                tokens = [*(accepted or {}).get(request.request_id, []), token_id]
            for token in tokens:
                request.append_output_token(token)
                s.emitted.append(token)
                status = request.check_token_stop()
                if status is not None:
                    self.finish_request(request.request_id, status)
                    finished.append(request)
                    break
            if s.num_draft_tokens and not request.status.finished:
                request.num_computed_tokens = request.num_tokens - 1  # the last token is fed next step
                self.kv.trim(request, request.num_computed_tokens)
        return finished

    def finish_request(self, request_id: str, status: RequestStatus) -> Request | None:
        """Finish (or abort) a request and free its blocks at once; unknown ids are ignored."""
        request = self.requests.pop(request_id, None)
        if request is None:
            return None
        if request in self.running:
            self.running.remove(request)
        else:
            try:
                self.waiting.remove(request)
            except ValueError:
                pass
        request.status = status
        if status is not RequestStatus.FINISHED_ABORTED:  # an aborted request's KV may be unwritten
            self.kv.write_through_blocks(request, request.num_computed_tokens)
        self.kv.free(request)
        return request

    def _defers_admission(self, out: SchedulerOutput) -> bool:
        """Whether this step leaves the waiting requests waiting, to admit them together later.

        Only a full engine defers: with running requests, more requests waiting than seats free,
        fewer than ``admission_batch`` seats free, and no prompt chunk in the step already (such a
        step runs eagerly anyway, so a prompt rides free). A free seat is held at most
        ``admission_batch`` steps in a row. A prompt admitted alone into a step of decode rows
        costs that whole step its CUDA graph."""
        free = self.max_num_seqs - len(self.running)
        if self.admission_batch <= 1 or not self.running or free <= 0:
            return False
        gathered = free >= min(self.admission_batch, len(self.waiting))
        chunked = any(s.num_tokens - s.num_draft_tokens > 1 for s in out.scheduled)
        if gathered or chunked or self._deferred_steps >= self.admission_batch:
            self._deferred_steps = 0
            return False
        self._deferred_steps += 1
        return True

    def _next_admissible(self) -> Request | None:
        """The first waiting request that can run: one whose grammar still compiles waits, without
        holding up those behind it."""
        for request in self.waiting:
            if request.grammar is None or request.grammar.ready:
                return request
        return None

    @property
    def all_waiting_on_grammars(self) -> bool:
        return bool(self.waiting) and self._next_admissible() is None

    def _victim_index(self, request: Request, index: int) -> int:
        """The most recently admitted running request at or after ``index`` (``request``'s own) whose
        blocks share ``request``'s pool: an expert-parallel replica's ranks each have their own."""
        for j in range(len(self.running) - 1, index, -1):
            if self.kv.shares_pool(request, self.running[j]):
                return j
        return index

    def _preempt(self, request: Request) -> None:
        self.kv.free(request)
        request.status = RequestStatus.PREEMPTED
        request.num_computed_tokens = 0
        request.num_preemptions += 1
        self.num_preemptions += 1
        self.waiting.appendleft(request)

    @staticmethod
    def _draft_room(request: Request, num_new: int, budget: int) -> int:
        """How much of the request's draft this step can verify: only a decode step with its last
        token on the host, within the token budget and short of the request's last output token."""
        if not request.draft_token_ids or num_new != 1 or request.num_output_placeholders:
            return 0
        if request.grammar is not None and not request.grammar.verifies_drafts:
            return 0  # reasoning, a thinking budget counting or a forced token: one token at a time
        room = min(budget - 1, request.max_tokens - len(request.output_token_ids) - 1)
        return max(0, min(len(request.draft_token_ids), room))

    def _scheduled(self, request: Request, num_new: int, num_draft: int = 0) -> ScheduledRequest:
        start = request.num_computed_tokens
        token_ids = request.all_token_ids[start : start + num_new]
        # Async scheduling: the last token may still be on the device (sampled by the step in
        # flight); the runner feeds it from there, the host list carries a 0 in its place.
        pending = len(token_ids) < num_new
        if pending:
            token_ids.append(0)
        if num_draft:
            token_ids += request.draft_token_ids[:num_draft]
        rid = request.request_id
        return ScheduledRequest(
            request=request,
            start=start,
            num_tokens=num_new + num_draft,
            block_ids=self.kv.block_ids(rid),
            token_ids=token_ids,
            samples=start + num_new == request.num_tokens + request.num_output_placeholders,
            pending_token=pending,
            num_draft_tokens=num_draft,
            block_base=self.kv.block_base(rid),
            window_block_ids=self.kv.window_block_ids(rid),
            window_base=self.kv.window_base(rid),
            reused_until=self.kv.reused_until(rid),
        )
