"""The server's handle on an engine core running in a child process.

An ``EngineClient`` that keeps everything but the engine itself in the server's process: it loads
its own tokenizer, admits requests synchronously (a bad prompt is a ValueError in the handler, as
with the in-thread client), and sends the core only token ids and sampling parameters. One reader
thread receives the core's batches; each batch reaches the event loop with one
``call_soon_threadsafe``. Stats and KV events are mirrored from what the core attaches to every
batch, so /metrics and /kv/events never wait on the core.

When the core process dies, every open stream ends with ``EngineDeadError`` and ``on_death`` is
called (from the event loop) with the reason; ``chassis serve`` then ends the replica.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import threading
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

from engine.clients.admission import Admission, AdmittingClient, PromptLimits, started
from engine.clients.request_stream import EngineDeadError
from engine.config import EngineConfig
from engine.core.kv_forwarding import replay
from engine.core.messages import (
    CoreFatal,
    CoreReady,
    LoadFailed,
    OutputBatch,
    Stop,
)
from engine.core.process_main import run_engine_core
from engine.executor.supervision import describe_exit, kill_at_exit, release_at_exit
from engine.kv.events import KVEventLog
from engine.outputs import EngineStats

log = logging.getLogger("chassis.engine_core")

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
# Stop -> exit: the core stops its tensor-parallel ranks first, which may take their own 10 s.
STOP_TIMEOUT_S = 20.0
EXIT_CODE_WAIT_S = 2.0  # after the pipe closed: how long to wait for the exit status that explains it


class SubprocessEngineClient(AdmittingClient):
    def __init__(
        self,
        config: EngineConfig,
        on_death: Callable[[str], None] | None = None,
        log_level: int | None = None,
        log_format: str = LOG_FORMAT,
    ) -> None:
        """``log_level`` of the core process: default, this process's root logger level."""
        self.config = config
        self.pid: int | None = None  # the engine core's process
        self.kv_events = KVEventLog(config.kv_event_capacity)  # mirror of the core's log
        self._on_death = on_death
        self._log_setup = (
            logging.getLogger().getEffectiveLevel() if log_level is None else log_level,
            log_format,
        )
        self._process: multiprocessing.process.BaseProcess | None = None
        self._commands: Connection | None = None
        self._send_lock = threading.Lock()
        self._reader: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._started: asyncio.Future | None = None
        self._admission = Admission(self._send)
        self._tokenizer: Any = None
        self._max_model_len: int | None = None
        self._stats: EngineStats | None = None
        self._fatal: str | None = None  # the reason the core gave before it exited
        self._closing = False

    # -- lifecycle ---------------------------------------------------------------------------
    async def start(self) -> None:
        """Start the core process and load the tokenizer while it loads the model; raises what the
        core raised if it cannot load."""
        if self._process is not None:
            return
        self._loop = asyncio.get_running_loop()
        self._started = self._loop.create_future()
        await asyncio.to_thread(self._spawn)
        try:
            self._tokenizer, vocab_size = await asyncio.to_thread(_load_tokenizer, self.config.model_dir)
            await self._started
        except BaseException:
            self._closing = True
            if not self._started.done():
                self._started.cancel()
            await asyncio.to_thread(self._stop_process, 0.0)
            raise
        self._admission.open(PromptLimits(self._tokenizer, vocab_size, self._max_model_len))

    async def shutdown(self) -> None:
        """Stop the core (after the server drained its streams) and wait for it to exit."""
        self._admission.close("engine shut down")
        if self._process is None:
            return
        self._closing = True
        self._send(Stop())
        await asyncio.to_thread(self._stop_process, STOP_TIMEOUT_S)
        self._admission.fail_all(EngineDeadError("engine shut down"))

    # -- read-only views -----------------------------------------------------------------------
    @property
    def tokenizer(self) -> Any:
        return started(self._tokenizer)

    @property
    def max_model_len(self) -> int:
        return started(self._max_model_len)

    def stats(self) -> EngineStats:
        """The core's stats as of its last message (it sends one after every change)."""
        return started(self._stats)

    # -- requests (admitted by ``AdmittingClient.generate``) ------------------------------------
    def _send(self, message) -> None:
        with self._send_lock:  # a stream dropped unread is released from whichever thread collects it
            try:
                self._commands.send(message)
            except (OSError, ValueError, AttributeError):
                pass  # the core is gone (or never started); the reader thread reports why

    # -- the core process ----------------------------------------------------------------------
    def _spawn(self) -> None:
        ctx = multiprocessing.get_context("spawn")
        commands_r, commands_w = ctx.Pipe(duplex=False)
        outputs_r, outputs_w = ctx.Pipe(duplex=False)
        process = ctx.Process(
            target=run_engine_core,
            args=(self.config, commands_r, outputs_w, *self._log_setup),
            name="chassis-engine-core",
        )
        process.start()
        commands_r.close()  # the child holds these now; ours would keep the pipes open past its death
        outputs_w.close()
        self._process, self._commands, self.pid = process, commands_w, process.pid
        kill_at_exit(process)
        self._reader = threading.Thread(
            target=self._read, args=(outputs_r,), name="chassis-core-reader", daemon=True
        )
        self._reader.start()
        log.info("engine core process started: pid %d", process.pid)

    def _stop_process(self, timeout: float) -> None:
        process = self._process
        process.join(timeout)
        if process.is_alive():
            process.kill()  # its tensor-parallel ranks exit once they see it gone
            process.join(5.0)
        with self._send_lock:
            self._commands.close()
        if self._reader is not None:
            self._reader.join(EXIT_CODE_WAIT_S + 1.0)
        release_at_exit(process)

    def _read(self, conn: Connection) -> None:
        """The reader thread: mirror stats and KV events here, hand outputs to the event loop."""
        while True:
            try:
                message = conn.recv()
            except (EOFError, OSError):
                break
            if isinstance(message, OutputBatch):
                replay(self.kv_events, message.kv_changes)
                self._stats = message.stats
                if message.outputs or message.errors:
                    self._call(self._dispatch, message)
            elif isinstance(message, CoreReady):
                replay(self.kv_events, message.kv_changes)
                self._stats = message.stats
                self._max_model_len = message.max_model_len
                self._call(self._resolve_start, None)
            elif isinstance(message, LoadFailed):
                self._call(self._resolve_start, message.error)
            elif isinstance(message, CoreFatal):
                self._fatal = message.reason
        conn.close()
        self._call(self._core_gone, self._exit_reason())

    def _exit_reason(self) -> str:
        if self._fatal is not None:
            return self._fatal
        if self._closing:
            return "engine shut down"
        self._process.join(EXIT_CODE_WAIT_S)
        return f"the engine core process (pid {self.pid}) {describe_exit(self._process.exitcode)}"

    def _call(self, callback: Callable, *args) -> None:
        try:
            self._loop.call_soon_threadsafe(callback, *args)
        except RuntimeError:  # the event loop is closed: nobody is left to tell
            pass

    # -- on the event loop ---------------------------------------------------------------------
    def _dispatch(self, batch: OutputBatch) -> None:
        for delta in batch.outputs:
            tracked = self._admission.get(delta.request_id)
            if tracked is not None:  # else released already (aborted): nobody reads it
                tracked.queue.put_nowait(tracked.output(delta))
        self._admission.deliver((), batch.errors)

    def _resolve_start(self, error: BaseException | None) -> None:
        if self._started.done():
            return
        if error is None:
            self._started.set_result(None)
        else:
            self._started.set_exception(error)

    def _core_gone(self, reason: str) -> None:
        if not self._started.done():
            self._started.set_exception(RuntimeError(f"{reason} before the model was loaded"))
            return
        if self._closing:
            return
        self._admission.close(reason)
        self._admission.fail_all(EngineDeadError(f"the engine core died: {reason}"))
        if self._on_death is not None:
            self._on_death(reason)
        else:
            log.error("the engine core died: %s", reason)


def _load_tokenizer(model_dir) -> tuple[Any, int]:
    from engine.checkpoint.model_config import load_model_config
    from engine.tokenizer.tokenizer import Tokenizer

    model_config = load_model_config(model_dir)
    return Tokenizer(model_dir, model_config.eos_token_ids), model_config.vocab_size
