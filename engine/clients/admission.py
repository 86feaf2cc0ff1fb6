"""Request admission, the one path every client takes, and the table of the requests it let in.

Admitting a request: refuse it if the engine is not running (``EngineDeadError``), validate and
tokenize the prompt (``ValueError``, raised in the caller, before the core hears of it), choose its
id, refuse an id that is in use, open its output queue, and send the drive loop an ``AddRequest``.
Outputs reach the queues through the same table; leaving a stream early aborts its request.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterable
from typing import TYPE_CHECKING, NamedTuple, TypeVar

from engine.clients.request_stream import EngineDeadError, RequestStream
from engine.clients.tracked_request import TrackedRequest
from engine.core.drive_loop import Command, Refusal
from engine.core.messages import AbortRequest, AddRequest
from engine.core.prompt_validation import validated_prompt_ids
from engine.outputs import RequestOutput
from engine.sampling.params import SamplingParams

if TYPE_CHECKING:
    from engine.tokenizer.tokenizer import Tokenizer


T = TypeVar("T")


def started(value: T | None) -> T:
    """``value``, which a client's ``start()`` sets; RuntimeError before that."""
    if value is None:
        raise RuntimeError("engine is not started; await engine.start() first")
    return value


class PromptLimits(NamedTuple):
    """What a prompt is checked against."""

    tokenizer: Tokenizer
    vocab_size: int
    max_model_len: int


class Admission:
    """Admission and the open-request table of one client. ``send`` hands a command to the drive
    loop (its queue, or the pipe to the core process); it is called from the event loop, or from
    whichever thread collects a stream dropped unread."""

    def __init__(self, send: Callable[[Command], None], limits: PromptLimits | None = None) -> None:
        """``limits``: what prompts are checked against, when known before ``open``."""
        self._send = send
        self._limits = limits
        self._refusal: str | None = "not started"  # why streams are refused; None while running
        self._open: dict[str, TrackedRequest] = {}

    @property
    def is_open(self) -> bool:
        return self._refusal is None

    def open(self, limits: PromptLimits | None = None) -> None:
        """Accept streams from now on (checking prompts against ``limits``, if given here)."""
        self._limits = limits or self._limits
        self._refusal = None

    def close(self, reason: str) -> None:
        """Refuse new streams from now on with ``EngineDeadError`` quoting ``reason``."""
        self._refusal = reason

    # -- admitting ---------------------------------------------------------------------------
    def check_running(self) -> None:
        if self._refusal is not None:
            raise EngineDeadError(f"engine is not running ({self._refusal})")

    def prompt_ids(self, prompt: str | list[int], params: SamplingParams) -> list[int]:
        """The prompt as token ids; ValueError for anything the engine cannot serve."""
        return validated_prompt_ids(prompt, params, *started(self._limits))

    def admit(
        self,
        prompt_ids: list[int],
        params: SamplingParams,
        request_id: str | None = None,
        cache_salt: str | None = None,
        final_only: bool = False,
    ) -> TrackedRequest:
        """Open a request whose prompt ``prompt_ids`` already checked, and send it to the core."""
        rid = request_id or uuid.uuid4().hex
        if rid in self._open:
            raise ValueError(f"request id {rid!r} is already in use")
        tracked = TrackedRequest(rid, prompt_ids, time.monotonic())
        self._open[rid] = tracked
        self._send(AddRequest(rid, prompt_ids, params, cache_salt, tracked.metrics.arrival_time, final_only))
        return tracked

    def abort(self, request_id: str) -> None:
        self._send(AbortRequest(request_id))

    def release(self, rid: str, finished: bool) -> None:
        """The request's stream ended (``finished``) or was left early (its request is aborted)."""
        self._open.pop(rid, None)
        if not finished:
            self._send(AbortRequest(rid))

    # -- outputs -----------------------------------------------------------------------------
    def get(self, request_id: str) -> TrackedRequest | None:
        """The open request; None once its stream was released (nobody reads its outputs)."""
        return self._open.get(request_id)

    def deliver(self, outputs: Iterable[RequestOutput], refusals: Iterable[Refusal] = ()) -> None:
        """Hand each output to its request's stream, and each refused add its ValueError."""
        for out in outputs:
            tracked = self._open.get(out.request_id)
            if tracked is not None:
                tracked.queue.put_nowait(out)
        for rid, reason in refusals:
            tracked = self._open.get(rid)
            if tracked is not None:
                tracked.queue.put_nowait(ValueError(reason))

    def fail_all(self, error: EngineDeadError) -> None:
        """End every open stream with ``error``."""
        for tracked in list(self._open.values()):  # a copy: another thread may release one meanwhile
            tracked.queue.put_nowait(error)

    def take_final(self, request_id: str) -> RequestOutput:
        """The finished output of a request admitted without a stream (``final_only``), once the
        loop has run it to the end; the request leaves the table."""
        item = self._open.pop(request_id).queue.get_nowait()
        if isinstance(item, BaseException):
            raise item
        return item


class AdmittingClient:
    """What every async client does the same way, through its ``Admission``."""

    _admission: Admission

    @property
    def ready(self) -> bool:
        return self._admission.is_open

    def generate(
        self,
        prompt: str | list[int],
        params: SamplingParams,
        request_id: str | None = None,
        cache_salt: str | None = None,
    ) -> AsyncIterator[RequestOutput]:
        """Validate now (ValueError for a bad prompt or an id in use), then stream this request's
        outputs; leaving the stream early aborts the request."""
        admission = self._admission
        admission.check_running()
        tracked = admission.admit(admission.prompt_ids(prompt, params), params, request_id, cache_salt)
        return RequestStream(tracked.request_id, tracked.queue, admission.release)

    async def abort(self, request_id: str) -> None:
        self._admission.abort(request_id)
