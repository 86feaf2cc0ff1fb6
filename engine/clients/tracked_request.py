"""The front end's side of one request: its prompt, what was generated so far, and its output queue.

The core sends deltas; this turns each into the full ``RequestOutput`` the server reads, as the
in-thread engine would have made it."""

from __future__ import annotations

import asyncio

from engine.core.messages import OutputDelta
from engine.outputs import RequestMetrics, RequestOutput


class TrackedRequest:
    def __init__(self, request_id: str, prompt_token_ids: list[int], arrival_time: float) -> None:
        self.request_id = request_id
        self.prompt_token_ids = prompt_token_ids
        self.queue: asyncio.Queue = asyncio.Queue()
        self.metrics = RequestMetrics(arrival_time=arrival_time)
        self._token_ids: list[int] = []
        self._text = ""

    def output(self, delta: OutputDelta) -> RequestOutput:
        self._token_ids += delta.new_token_ids
        self._text += delta.new_text
        metrics = self.metrics
        metrics.first_scheduled_time = delta.first_scheduled_time
        metrics.first_token_time = delta.first_token_time
        metrics.finished_time = delta.finished_time
        return RequestOutput(
            request_id=self.request_id,
            prompt_token_ids=self.prompt_token_ids,
            new_token_ids=delta.new_token_ids,
            token_ids=list(self._token_ids),
            new_text=delta.new_text,
            text=self._text,
            new_logprobs=delta.new_logprobs,
            finished=delta.finish_reason is not None,
            finish_reason=delta.finish_reason,
            stop_reason=delta.stop_reason,
            num_cached_tokens=delta.num_cached_tokens,
            metrics=metrics,
        )
