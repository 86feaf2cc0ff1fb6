"""The engine-core process's ends of the drive loop: commands from the front end's pipe, and one
message per turn back (outputs, refusals, KV events, a stats snapshot).

The loop itself is ``engine.core.drive_loop``. A turn that changed nothing sends nothing, so an idle
core is silent.
"""

from __future__ import annotations

import threading
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING

from engine.core.drive_loop import CommandQueue, Refusal
from engine.core.kv_forwarding import ForwardingKVEventLog
from engine.core.messages import OutputBatch, Stop, to_delta

if TYPE_CHECKING:  # the front end imports this package too; only the core process loads the engine
    from engine.core.engine_core import EngineCore
    from engine.outputs import EngineStats, RequestOutput


class CommandInbox(CommandQueue):
    """A thread moves commands off the pipe as they arrive, so the front end's sends never wait
    for a step to end (a full pipe would block the server's event loop)."""

    def __init__(self, conn: Connection) -> None:
        super().__init__(waits=True)
        threading.Thread(target=self._read, args=(conn,), name="chassis-core-commands", daemon=True).start()

    def _read(self, conn: Connection) -> None:
        while True:
            try:
                self.put(conn.recv())
            except (EOFError, OSError):  # the front end closed its end: nothing more will come
                self.put(Stop())
                return


class Outbox:
    """The pipe to the front end. Sends are whole messages: the tensor-parallel watchdog thread may
    report a fatal error while the loop is sending a batch."""

    def __init__(self, conn: Connection) -> None:
        self._conn = conn
        self._lock = threading.Lock()

    def send(self, message) -> None:
        with self._lock:
            self._conn.send(message)


class BatchSender:
    """The drive loop's sink in the core process: one ``OutputBatch`` for each turn that changed
    anything the front end sees."""

    def __init__(self, core: EngineCore, outbox: Outbox, kv_log: ForwardingKVEventLog) -> None:
        self._core = core
        self._outbox = outbox
        self._kv_log = kv_log
        self._last_stats: EngineStats | None = None

    def __call__(self, outputs: list[RequestOutput], refusals: list[Refusal]) -> None:
        stats = self._core.stats()
        kv_changes = self._kv_log.take()
        if outputs or refusals or kv_changes or stats != self._last_stats:
            self._outbox.send(OutputBatch([to_delta(o) for o in outputs], refusals, kv_changes, stats))
            self._last_stats = stats
