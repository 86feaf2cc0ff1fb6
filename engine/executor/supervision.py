"""Small facts about processes both sides need: a child that outlives its parent, and how one ended."""

from __future__ import annotations

import os
import signal
import threading
import time

PARENT_POLL_S = 0.5
ORPHAN_EXIT_CODE = 3


def exit_when_orphaned() -> None:
    """Exit this process (a background thread checks twice a second) once its parent is gone.

    A SIGKILLed server runs no cleanup, so its engine core must notice on its own; the core's own
    tensor-parallel ranks then notice the core is gone the same way."""
    parent = os.getppid()

    def watch() -> None:
        while True:
            time.sleep(PARENT_POLL_S)
            if os.getppid() != parent:
                os._exit(ORPHAN_EXIT_CODE)

    threading.Thread(target=watch, name="chassis-orphan-watch", daemon=True).start()


def describe_exit(exitcode: int | None) -> str:
    """'was killed by SIGKILL', 'exited with code 1', ... (``multiprocessing`` exit codes)."""
    if exitcode is None:
        return "stopped responding"
    if exitcode < 0:
        try:
            return f"was killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"was killed by signal {-exitcode}"
    return f"exited with code {exitcode}"
