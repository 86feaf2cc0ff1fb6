"""The engine stepped by its caller, in the caller's thread: the client inside the offline ``LLM``.

``run_batch`` (what ``LLM.generate`` calls) runs the drive loop until every request has finished.
As an ``EngineClient`` (``LLM.client``) an asyncio task on the caller's event loop runs it instead,
one turn at a time, yielding to the streams between turns; a step blocks that event loop while it
runs, which suits tests, notebooks and scripts, not a server that must answer while it generates
(that is what the in-thread and subprocess clients are for).
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Sequence

from engine.clients.admission import Admission
from engine.clients.local_core import LocalCoreClient
from engine.clients.request_stream import EngineDeadError
from engine.core.drive_loop import Command, CommandQueue, drive, run_turn
from engine.core.engine_core import EngineCore
from engine.outputs import RequestOutput
from engine.sampling.params import SamplingParams


class InlineEngineClient(LocalCoreClient):
    def __init__(self, core: EngineCore) -> None:
        self._core = core
        self._commands = CommandQueue(waits=False)
        self._admission = Admission(self._send, self._prompt_limits())
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None  # set when a command arrives for the driver task
        self._driver: asyncio.Task | None = None
        self._batch_ids = itertools.count(1)

    def run_batch(
        self, prompts: Sequence[str | list[int]], params: Sequence[SamplingParams]
    ) -> list[RequestOutput]:
        """Run every prompt to completion; each one's finished output, in prompt order. Every prompt
        is checked before any is admitted, so a bad one leaves no half-run batch behind."""
        ids = [self._admission.prompt_ids(p, sp) for p, sp in zip(prompts, params, strict=True)]
        rids = [
            self._admission.admit(p, sp, f"llm-{next(self._batch_ids)}", final_only=True).request_id
            for p, sp in zip(ids, params, strict=True)
        ]
        drive(self.core, self._commands, self._admission.deliver)
        return [self._admission.take_final(rid) for rid in rids]

    # -- EngineClient ----------------------------------------------------------------------------
    async def start(self) -> None:
        if self._driver is not None:
            return
        self._loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        self._driver = asyncio.create_task(self._drive(), name="chassis-inline-engine")
        self._admission.open()

    async def shutdown(self) -> None:
        self._admission.close("engine shut down")
        if self._driver is None:
            return
        self._driver.cancel()
        await asyncio.gather(self._driver, return_exceptions=True)
        self._driver = None
        self.core.shutdown()  # the other tensor-parallel ranks, if any
        self._admission.fail_all(EngineDeadError("engine shut down"))

    def _send(self, command: Command) -> None:
        self._commands.put(command)
        if self._driver is not None and not self._driver.done():
            try:  # a stream dropped unread is released from whichever thread collects it
                self._loop.call_soon_threadsafe(self._wake.set)
            except RuntimeError:  # that event loop is closed: only run_batch drives the core now
                pass

    async def _drive(self) -> None:
        try:
            while True:
                await self._wake.wait()
                self._wake.clear()
                while run_turn(self.core, self._commands, self._admission.deliver):
                    await asyncio.sleep(0)  # the streams read what this turn delivered
        except Exception as exc:
            self._crashed(exc)
