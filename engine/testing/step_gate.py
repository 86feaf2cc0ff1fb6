"""A gate that lets a test hold the engine mid-generation and release it when the test says so.

Tests that must act while a request is still generating (a client giving up, a core killed, a
chunk that must reach the client before the next one exists) cannot rely on the model being slow:
a tiny model on a fast machine finishes 400 tokens in well under a second. Instead they start the
engine with ``CHASSIS_TEST_STEP_GATE=<file>`` in its environment and write a number N to that file:

- file absent: the engine runs freely (so a gated replica can serve ordinary tests too);
- file holds N: the engine takes no step while every unfinished request has N or more output
  tokens. N = 1 lets each request produce its first token, N + 1 one more, and so on;
- the file removed: the engine goes on.

While held, ``EngineCore.step`` (the one seam: it asks ``holds``) takes no step and returns no
outputs after a short pause, so the loop around it keeps applying commands: requests that arrive are
admitted (and generate up to N before the engine holds again), aborts land at once. Only tests and
demos set the variable; unset, ``holds`` answers False at once.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Protocol

from engine import env

ENV_VAR = env.TEST_STEP_GATE
POLL_S = 0.005

_gate_file = env.test_step_gate_file()


class _Generating(Protocol):
    output_token_ids: list[int]


def holds(unfinished: Iterable[_Generating]) -> bool:
    """Whether the gate keeps the engine from taking this step (True after a pause of ``POLL_S``,
    so a loop that keeps asking does not spin)."""
    if _gate_file is None:
        return False
    try:
        limit = int(Path(_gate_file).read_text())
    except FileNotFoundError:
        return False
    lengths = [len(r.output_token_ids) for r in unfinished]
    if not lengths or min(lengths) < limit:
        return False
    time.sleep(POLL_S)
    return True


class StepGate:
    """The test's side of the gate: where it is, and how to move it."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    @property
    def env(self) -> dict[str, str]:
        """The environment entry that points an engine process at this gate."""
        return {ENV_VAR: str(self.path)}

    def hold_at(self, tokens: int) -> None:
        """Let every request generate up to ``tokens`` output tokens, then hold the engine."""
        staged = self.path.with_name(self.path.name + ".new")
        staged.write_text(str(tokens))
        os.replace(staged, self.path)  # the engine never reads a half-written number

    def open(self) -> None:
        self.path.unlink(missing_ok=True)
