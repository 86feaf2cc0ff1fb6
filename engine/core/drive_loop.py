"""The one loop that drives an ``EngineCore``: apply the queued commands, take a step, hand what the
turn produced to a sink.

Every driver runs this loop: the in-thread client from its engine thread, the engine-core process
from its main thread, and the offline ``LLM`` from the caller's own thread. They differ only in where
commands come from and where a turn's results go:

- A ``CommandQueue`` that waits (a loop with a thread of its own) blocks for the next command when no
  request is unfinished, and otherwise takes what has arrived without waiting. One that does not wait
  (a loop its caller runs) ends the loop when it is empty and no request is unfinished.
- The sink gets every turn's outputs and refused adds, even when both are empty, so a sink that
  mirrors state (the engine-core process sends stats and KV events) can tell what changed.
"""

from __future__ import annotations

import queue
from collections.abc import Callable
from typing import TYPE_CHECKING

from engine.core.gc_heap import collect_if_overdue, collect_when_idle
from engine.core.messages import AbortRequest, AddRequest, Stop

if TYPE_CHECKING:  # the front ends import this module too; only the driver's process loads the engine
    from engine.core.engine_core import EngineCore
    from engine.outputs import RequestOutput

Command = AddRequest | AbortRequest | Stop
Refusal = tuple[str, str]  # (request id, why the core refused to add it): a ValueError for its stream
TurnSink = Callable[[list["RequestOutput"], list[Refusal]], None]


class CommandQueue:
    """Commands for the loop, put from any thread.

    ``waits``: ``get(block=True)`` waits for the next command (a loop in its own thread or process).
    Without it an empty queue means there is nothing more to do (a loop its caller runs)."""

    def __init__(self, waits: bool = True) -> None:
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._waits = waits

    @property
    def waits(self) -> bool:
        return self._waits

    def put(self, command: Command) -> None:
        self._queue.put(command)

    def get(self, block: bool) -> Command | None:
        """The next command; None when none is waiting and this call may not (or does not) wait."""
        try:
            return self._queue.get(block=block and self._waits)
        except queue.Empty:
            return None


def drive(core: EngineCore, commands: CommandQueue, sink: TurnSink) -> None:
    """Run turns until a ``Stop`` command, or until idle with no command to wait for."""
    while run_turn(core, commands, sink):
        pass


def run_turn(core: EngineCore, commands: CommandQueue, sink: TurnSink) -> bool:
    """One turn: apply every waiting command (waiting for one first only when no request is
    unfinished), step if anything is unfinished, then call ``sink``. False, without a step or a
    call to ``sink``, when told to stop or when idle with nothing to wait for."""
    outputs: list[RequestOutput] = []
    refusals: list[Refusal] = []
    block = not core.has_unfinished()
    if block and commands.waits:
        collect_when_idle()  # deferred full collections (engine/core/gc_heap.py), before the wait
    while (command := commands.get(block)) is not None:
        block = False
        if isinstance(command, AddRequest):
            _add(core, command, refusals)
        elif isinstance(command, AbortRequest):
            out = core.abort(command.request_id)
            if out is not None:
                outputs.append(out)
        elif isinstance(command, Stop):
            return False
        else:
            raise RuntimeError(f"unknown command from the front end: {command!r}")
    if block:  # idle, and the queue does not wait: nothing more to do
        return False
    if core.has_unfinished():
        outputs += core.step()
        collect_if_overdue()
    sink(outputs, refusals)
    return True


def _add(core: EngineCore, command: AddRequest, refusals: list[Refusal]) -> None:
    try:
        prepared = core.prepare(
            command.prompt_token_ids,
            command.params,
            command.request_id,
            command.cache_salt,
            final_only=command.final_only,
            arrival_time=command.arrival_time,
        )
        core.add(prepared)
    except ValueError as exc:
        refusals.append((command.request_id, str(exc)))
