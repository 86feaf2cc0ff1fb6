"""A tensor-parallel replica whose rank died must end, so the control plane sees the process exit
and relaunches it: mark the server failed, stop it, and exit hard if the stop hangs (an engine
thread blocked in an NCCL collective never returns)."""

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


def end_server_on_rank_failure(state: ServerState, request_exit: Callable[[], None]) -> None:
    from engine.runner.tp_executor import set_rank_failure_handler

    def handle(message: str) -> None:
        log.error("ending this replica: %s", message)
        state.load_error = message  # /health answers 503 "failed" with it until the process is gone
        state.ready = False
        request_exit()
        timer = threading.Timer(HARD_EXIT_AFTER_S, _hard_exit, (message,))
        timer.daemon = True
        timer.start()

    set_rank_failure_handler(handle)


def _hard_exit(message: str) -> None:
    print(f"chassis serve: graceful stop did not finish; exiting. {message}", file=sys.stderr, flush=True)
    os._exit(EXIT_CODE)
