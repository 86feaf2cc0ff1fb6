"""One request's outputs as an async iterator, for the engines the server drives (in a thread or in
another process): leaving the iterator early aborts the request."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from engine.outputs import RequestOutput


class EngineDeadError(RuntimeError):
    """The engine stopped (shut down, crashed, or its process died); no output will come."""


class RequestStream:
    """Async iterator over one request's outputs.

    Leaving it early in any way (break + aclose, task cancellation, or dropping it unread) aborts
    the request, so a vanished client never keeps KV blocks busy.
    """

    def __init__(self, request_id: str, queue_: asyncio.Queue, release: Callable[[str, bool], None]) -> None:
        self.request_id = request_id
        self._queue = queue_
        self._release = release
        self._done = False

    def __aiter__(self) -> RequestStream:
        return self

    async def __anext__(self) -> RequestOutput:
        if self._done:
            raise StopAsyncIteration
        try:
            item = await self._queue.get()
        except BaseException:  # cancelled while waiting: the consumer is gone
            self._close(finished=False)
            raise
        if isinstance(item, BaseException):
            self._close(finished=True)
            raise item
        if item.finished:
            self._close(finished=True)
        return item

    async def aclose(self) -> None:
        self._close(finished=False)

    def _close(self, finished: bool) -> None:
        if not self._done:
            self._done = True
            self._release(self.request_id, finished)

    def __del__(self) -> None:
        if not self._done:
            self._close(finished=False)
