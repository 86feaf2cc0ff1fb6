"""The engine in a thread of the server's own process (``chassis serve --engine-in-thread``); its
public name is ``engine.AsyncLLMEngine``.

The drive loop runs in one dedicated thread (model steps never block the event loop). Requests and
aborts reach it through a thread-safe command queue; each turn's outputs come back to the event loop
with one ``call_soon_threadsafe``. Closing or cancelling a request's iterator aborts the request,
which frees its KV blocks on the engine thread's next turn.
"""

from __future__ import annotations

import asyncio
import threading

from engine.clients.admission import Admission
from engine.clients.local_core import LocalCoreClient
from engine.clients.request_stream import EngineDeadError
from engine.config import EngineConfig
from engine.core.drive_loop import CommandQueue, Refusal, drive
from engine.core.engine_core import EngineCore
from engine.core.messages import Stop
from engine.outputs import RequestOutput


class InThreadEngineClient(LocalCoreClient):
    def __init__(self, config: EngineConfig) -> None:
        self.config = config
        self._commands = CommandQueue(waits=True)
        self._admission = Admission(self._commands.put)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    async def start(self) -> None:
        """Load the model (in a worker thread) and start the engine thread."""
        if self._thread is not None:
            return
        self._loop = asyncio.get_running_loop()
        self._core = await self._loop.run_in_executor(None, EngineCore, self.config)
        self._thread = threading.Thread(target=self._run, name="chassis-engine", daemon=True)
        self._thread.start()
        self._admission.open(self._prompt_limits())

    async def shutdown(self) -> None:
        self._admission.close("engine shut down")
        if self._thread is None:
            return
        self._commands.put(Stop())
        await asyncio.get_running_loop().run_in_executor(None, self._thread.join)
        self._thread = None
        self.core.shutdown()  # the other tensor-parallel ranks, if any
        self._admission.fail_all(EngineDeadError("engine shut down"))

    # -- the engine thread ---------------------------------------------------------------------
    def _run(self) -> None:
        try:
            drive(self.core, self._commands, self._deliver)
        except BaseException as exc:
            self._loop.call_soon_threadsafe(self._crashed, exc)

    def _deliver(self, outputs: list[RequestOutput], refusals: list[Refusal]) -> None:
        if outputs or refusals:
            self._loop.call_soon_threadsafe(self._admission.deliver, outputs, refusals)
