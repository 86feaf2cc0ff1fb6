"""A gate that lets a test hold the engine mid-generation and release it when the test says so.

Tests that must act while a request is still generating (a client giving up, a core killed, a
chunk that must reach the client before the next one exists) cannot rely on the model being slow:
a tiny model on a fast machine finishes 400 tokens in well under a second. Instead they start the
engine with ``CHASSIS_TEST_STEP_GATE=<file>`` in its environment and write a number N to that file:

- file absent: the engine runs freely (so a gated replica can serve ordinary tests too);
- file holds N: the engine takes no step while every unfinished request has N or more output
  tokens. N = 1 lets each request produce its first token, N + 1 one more, and so on;
- the file removed: the engine goes on.

While held the engine's loop waits inside ``EngineCore.step`` (the one seam, a call to ``hold``);
commands that arrive meanwhile (an abort) are applied right after the step the gate let go.
Only tests and demos set the variable; unset, ``hold`` returns at once.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Protocol

ENV_VAR = "CHASSIS_TEST_STEP_GATE"
POLL_S = 0.005

_gate_file = os.environ.get(ENV_VAR) or None


class _Generating(Protocol):
    output_token_ids: list[int]


def hold(unfinished: Iterable[_Generating]) -> None:
    """Return when the gate (if any) lets the engine take its next step."""
    if _gate_file is None:
        return
    requests = list(unfinished)  # the engine's thread is the one waiting here: they cannot change
    while _held(_gate_file, requests):
        time.sleep(POLL_S)


def _held(path: str, requests: list[_Generating]) -> bool:
    try:
        limit = int(Path(path).read_text())
    except FileNotFoundError:
        return False
    return bool(requests) and min(len(r.output_token_ids) for r in requests) >= limit


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
