"""The engine core's loop inside its own process: apply the front end's commands, take a step, and
send everything the turn produced (outputs, refusals, KV events, a stats snapshot) as one message.

It blocks on the command queue only when no request is unfinished; while work runs it takes what
has arrived without waiting. A turn that changed nothing sends nothing, so an idle core is silent.
"""

from __future__ import annotations

import queue
import threading
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING

from engine.core.kv_forwarding import ForwardingKVEventLog
from engine.core.messages import AbortRequest, AddRequest, OutputBatch, Stop, to_delta
from engine.outputs import EngineStats, RequestOutput

if TYPE_CHECKING:  # the front end imports this package too; only the core process loads the engine
    from engine.core.engine_core import EngineCore


class CommandInbox:
    """A thread moves commands off the pipe as they arrive, so the front end's sends never wait
    for a step to end (a full pipe would block the server's event loop)."""

    def __init__(self, conn: Connection) -> None:
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        threading.Thread(target=self._read, args=(conn,), name="chassis-core-commands", daemon=True).start()

    def _read(self, conn: Connection) -> None:
        while True:
            try:
                self._queue.put(conn.recv())
            except (EOFError, OSError):  # the front end closed its end: nothing more will come
                self._queue.put(Stop())
                return

    def get(self, block: bool):
        """The next command; None when none is waiting and ``block`` is False."""
        try:
            return self._queue.get(block=block)
        except queue.Empty:
            return None


class Outbox:
    """The pipe to the front end. Sends are whole messages: the tensor-parallel watchdog thread may
    report a fatal error while the loop is sending a batch."""

    def __init__(self, conn: Connection) -> None:
        self._conn = conn
        self._lock = threading.Lock()

    def send(self, message) -> None:
        with self._lock:
            self._conn.send(message)


def serve(core: EngineCore, inbox: CommandInbox, outbox: Outbox, kv_log: ForwardingKVEventLog) -> None:
    """Run until the front end says stop (or goes away)."""
    last_stats: EngineStats | None = None
    while True:
        outputs: list[RequestOutput] = []
        errors: list[tuple[str, str]] = []
        if not _apply_commands(core, inbox, not core.has_unfinished(), outputs, errors):
            return
        if core.has_unfinished():
            outputs += core.step()
        stats = core.stats()
        kv_changes = kv_log.take()
        if outputs or errors or kv_changes or stats != last_stats:
            outbox.send(OutputBatch([to_delta(o) for o in outputs], errors, kv_changes, stats))
            last_stats = stats


def _apply_commands(
    core: EngineCore,
    inbox: CommandInbox,
    block: bool,
    outputs: list[RequestOutput],
    errors: list[tuple[str, str]],
) -> bool:
    """Apply every waiting command (waiting for one first when ``block``); False once told to stop."""
    while (command := inbox.get(block)) is not None:
        block = False
        if isinstance(command, AddRequest):
            try:
                core.add(
                    core.prepare(
                        command.prompt_token_ids,
                        command.params,
                        command.request_id,
                        command.cache_salt,
                        arrival_time=command.arrival_time,
                    )
                )
            except ValueError as exc:
                errors.append((command.request_id, str(exc)))
        elif isinstance(command, AbortRequest):
            out = core.abort(command.request_id)
            if out is not None:
                outputs.append(out)
        elif isinstance(command, Stop):
            return False
        else:
            raise RuntimeError(f"unknown command from the front end: {command!r}")
    return True
