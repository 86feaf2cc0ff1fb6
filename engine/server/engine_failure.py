"""A replica whose engine cannot run any more must end, so the control plane sees the process exit
and relaunches it: mark the server failed (/health answers 503 "failed" with the reason until the
process is gone), stop it, and exit hard if the stop hangs (a thread blocked in an NCCL collective
never returns).

The engine is gone when the engine-core process dies (crash, SIGKILL, a dead tensor-parallel rank,
which it reports before exiting) or, with the engine in the server's own thread, when a
tensor-parallel rank dies.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import Callable

from engine.server.state import ServerState

log = logging.getLogger("chassis.server")

HARD_EXIT_AFTER_S = 5.0
EXIT_CODE = 1


def replica_ender(state: ServerState, request_exit: Callable[[], None]) -> Callable[[str], None]:
    """A callback taking the reason the engine is gone; callable from any thread."""

    def end(reason: str) -> None:
        log.error("ending this replica: %s", reason)
        state.load_error = reason
        state.ready = False
        request_exit()
        timer = threading.Timer(HARD_EXIT_AFTER_S, _hard_exit, (reason,))
        timer.daemon = True
        timer.start()

    return end


def _hard_exit(reason: str) -> None:
    print(f"chassis serve: graceful stop did not finish; exiting. {reason}", file=sys.stderr, flush=True)
    os._exit(EXIT_CODE)
