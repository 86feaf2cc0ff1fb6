"""Continuous batching, vLLM v1 style: no prefill/decode phases.

Every request has ``num_computed_tokens`` against ``num_tokens``; each step gives running requests
their missing tokens first (decodes and unfinished prefill chunks), then admits waiting requests,
all under one token budget, so prefill chunks and decodes share a step. When the KV pool runs dry
the most recently admitted running request is preempted (its blocks freed, to be recomputed later).
Pure Python: no torch.
"""

from __future__ import annotations

import time
from collections import deque

from engine.kv.kv_manager import KVCacheManager
from engine.scheduler.output import ScheduledRequest, SchedulerOutput
from engine.scheduler.request import Request, RequestStatus


class Scheduler:
    def __init__(self, kv: KVCacheManager, max_num_batched_tokens: int, max_num_seqs: int) -> None:
        self.kv = kv
        self.max_num_batched_tokens = max_num_batched_tokens
        self.max_num_seqs = max_num_seqs
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
            num_new = min(request.num_tokens - request.num_computed_tokens, budget)
            while not self.kv.allocate_slots(request, request.num_computed_tokens, num_new):
                victim = self.running.pop()
                self._preempt(victim)
                out.preempted_ids.append(victim.request_id)
                if victim is request:
                    break
            else:
                out.scheduled.append(self._scheduled(request, num_new))
                budget -= num_new
                i += 1

        # Admitting new work in a step that had to preempt would only thrash.
        while self.waiting and budget > 0 and len(self.running) < self.max_num_seqs and not out.preempted_ids:
            request = self.waiting[0]
            hit = self.kv.find_cached_prefix(request)
            num_new = min(request.num_tokens - hit.num_tokens, budget)
            if not self.kv.allocate_slots(request, hit.num_tokens, num_new, hit):
                break
            self.waiting.popleft()
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
            s.request.num_computed_tokens += s.num_tokens
        return out

    def update_from_output(self, out: SchedulerOutput, sampled: dict[str, int]) -> list[Request]:
        """Append sampled tokens; returns requests that finished on a token-level stop condition."""
        finished = []
        for s in out.scheduled:
            request = s.request
            if not s.samples or request.status.finished or request.request_id not in sampled:
                continue
            request.append_output_token(sampled[request.request_id])
            status = request.check_token_stop()
            if status is not None:
                self.finish_request(request.request_id, status)
                finished.append(request)
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
        self.kv.free(request)
        return request

    def _preempt(self, request: Request) -> None:
        self.kv.free(request)
        request.status = RequestStatus.PREEMPTED
        request.num_computed_tokens = 0
        request.num_preemptions += 1
        self.num_preemptions += 1
        self.waiting.appendleft(request)

    def _scheduled(self, request: Request, num_new: int) -> ScheduledRequest:
        start = request.num_computed_tokens
        return ScheduledRequest(
            request=request,
            start=start,
            num_tokens=num_new,
            block_ids=self.kv.block_ids(request.request_id),
            token_ids=request.all_token_ids[start : start + num_new],
            samples=start + num_new == request.num_tokens,
        )
