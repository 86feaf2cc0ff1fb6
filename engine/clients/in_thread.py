"""asyncio front of the engine for the HTTP server.

The engine loop runs in one dedicated thread (model steps never block the event loop). Requests and
aborts reach it through a thread-safe command queue; outputs come back to per-request asyncio queues
via ``call_soon_threadsafe``. Closing or cancelling a request's iterator aborts the request, which
frees its KV blocks on the engine thread's next turn.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
from collections.abc import AsyncIterator

from engine.clients.request_stream import EngineDeadError, RequestStream
from engine.config import EngineConfig
from engine.core.engine_core import EngineCore, PreparedRequest
from engine.kv.events import KVEventLog
from engine.outputs import EngineStats, RequestOutput
from engine.sampling.params import SamplingParams
from engine.tokenizer.tokenizer import Tokenizer

__all__ = ["AsyncLLMEngine", "EngineDeadError", "RequestStream"]

logger = logging.getLogger(__name__)

_STOP = object()


class AsyncLLMEngine:
    def __init__(self, config: EngineConfig) -> None:
        self.config = config
        self.ready = False
        self._core: EngineCore | None = None
        self._commands: queue.SimpleQueue = queue.SimpleQueue()
        self._streams: dict[str, asyncio.Queue] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    # -- lifecycle ---------------------------------------------------------------------------
    async def start(self) -> None:
        """Load the model (in a worker thread) and start the engine loop thread."""
        if self._thread is not None:
            return
        self._loop = asyncio.get_running_loop()
        self._core = await self._loop.run_in_executor(None, EngineCore, self.config)
        self._thread = threading.Thread(target=self._run, name="chassis-engine", daemon=True)
        self._thread.start()
        self.ready = True

    async def shutdown(self) -> None:
        self.ready = False
        if self._thread is None:
            return
        self._commands.put(_STOP)
        await asyncio.get_running_loop().run_in_executor(None, self._thread.join)
        self._thread = None
        self.core.shutdown()  # the other tensor-parallel ranks, if any
        for rid, stream in list(self._streams.items()):
            stream.put_nowait(EngineDeadError("engine shut down"))
            self._streams.pop(rid, None)

    # -- read-only views -----------------------------------------------------------------------
    @property
    def core(self) -> EngineCore:
        if self._core is None:
            raise RuntimeError("engine is not started; await engine.start() first")
        return self._core

    @property
    def tokenizer(self) -> Tokenizer:
        return self.core.tokenizer

    @property
    def max_model_len(self) -> int:
        return self.core.max_model_len

    @property
    def kv_events(self) -> KVEventLog:
        return self.core.kv_events

    def stats(self) -> EngineStats:
        return self.core.stats()

    # -- requests ------------------------------------------------------------------------------
    def generate(
        self,
        prompt: str | list[int],
        params: SamplingParams,
        request_id: str | None = None,
        cache_salt: str | None = None,
    ) -> AsyncIterator[RequestOutput]:
        """Validate now (ValueError for a bad prompt), then stream this request's outputs."""
        if not self.ready or self._error is not None:
            raise EngineDeadError(f"engine is not running ({self._error or 'not started'})")
        prepared = self.core.prepare(prompt, params, request_id, cache_salt)
        rid = prepared.request.request_id
        if rid in self._streams:
            raise ValueError(f"request id {rid!r} is already in use")
        stream: asyncio.Queue = asyncio.Queue()
        self._streams[rid] = stream
        self._commands.put(("add", prepared))
        return RequestStream(rid, stream, self._release)

    def _release(self, rid: str, finished: bool) -> None:
        self._streams.pop(rid, None)
        if not finished:
            self._commands.put(("abort", rid))

    async def abort(self, request_id: str) -> None:
        self._commands.put(("abort", request_id))

    # -- engine thread -------------------------------------------------------------------------
    def _run(self) -> None:
        core = self.core
        try:
            while True:
                block = not core.has_unfinished()
                if not self._drain_commands(core, block):
                    return
                if core.has_unfinished():
                    self._deliver(core.step())
        except BaseException as exc:  # the engine is dead; every open stream must hear about it
            logger.exception("engine loop crashed")
            self._error = exc
            self.ready = False
            self._loop.call_soon_threadsafe(self._fail_all, exc)

    def _drain_commands(self, core: EngineCore, block: bool) -> bool:
        """Apply queued adds/aborts; waits for one when idle. False once asked to stop."""
        while True:
            try:
                command = self._commands.get(block=block)
            except queue.Empty:
                return True
            block = False
            if command is _STOP:
                return False
            kind, payload = command
            if kind == "add":
                self._add(core, payload)
            elif kind == "abort":
                out = core.abort(payload)
                if out is not None:
                    self._deliver([out])

    def _add(self, core: EngineCore, prepared: PreparedRequest) -> None:
        try:
            core.add(prepared)
        except ValueError as exc:
            self._deliver_error(prepared.request.request_id, exc)

    def _deliver(self, outputs: list[RequestOutput]) -> None:
        if outputs:
            self._loop.call_soon_threadsafe(self._dispatch, outputs)

    def _deliver_error(self, rid: str, exc: BaseException) -> None:
        self._loop.call_soon_threadsafe(self._dispatch_error, rid, exc)

    def _dispatch(self, outputs: list[RequestOutput]) -> None:
        for out in outputs:
            stream = self._streams.get(out.request_id)
            if stream is not None:
                stream.put_nowait(out)

    def _dispatch_error(self, rid: str, exc: BaseException) -> None:
        stream = self._streams.get(rid)
        if stream is not None:
            stream.put_nowait(exc)

    def _fail_all(self, exc: BaseException) -> None:
        for stream in self._streams.values():
            stream.put_nowait(EngineDeadError(f"engine loop crashed: {exc!r}"))
