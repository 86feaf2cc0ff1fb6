"""Process supervision, the one copy: how a child process ended, a child that outlives its parent, and
children to stop when this process exits.

Used by the subprocess client (its engine-core process), the engine-core process itself (orphan
watch) and the tensor-parallel executor (its rank processes, which watch for orphaning too).
"""

from __future__ import annotations

import atexit
import logging
import os
import signal
import subprocess
import threading
import time
import weakref
from collections.abc import Callable
from typing import TypeVar

log = logging.getLogger("chassis.supervision")

PARENT_POLL_S = 0.5
ORPHAN_EXIT_CODE = 3
KILL_JOIN_S = 5.0  # after SIGKILL, how long to wait for the child to be reaped

T = TypeVar("T")

_stop_at_exit: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # owner -> stop(owner)
_hook_registered = False


def describe_exit(exitcode: int | None) -> str:
    """'was killed by SIGKILL', 'exited with code 1', ... (``multiprocessing`` and ``subprocess``
    exit codes: negative for a signal, None while running)."""
    if exitcode is None:
        return "stopped responding"
    if exitcode < 0:
        try:
            return f"was killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"was killed by signal {-exitcode}"
    return f"exited with code {exitcode}"


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


def stop_at_exit(owner: T, stop: Callable[[T], None]) -> None:
    """Call ``stop(owner)`` when this interpreter exits, unless ``owner`` was released or collected
    first. ``stop`` must not hold ``owner`` (pass ``Class.method`` or a function, not a bound
    method), or ``owner`` could never be collected.

    Call it after the children are started: the exit hook is registered on first use, so after
    ``multiprocessing``'s own (imported by ``Process.start()``), and atexit runs hooks last-in
    first-out. That hook joins child processes, which would wait forever on one that ignores SIGTERM
    (the engine core and tensor-parallel ranks do: a stop signal reaches the whole process group)."""
    global _hook_registered
    _stop_at_exit[owner] = stop
    if not _hook_registered:
        atexit.register(_stop_all)
        _hook_registered = True


def release_at_exit(owner: object) -> None:
    """``owner`` stopped its children itself: nothing left to do for it at exit."""
    _stop_at_exit.pop(owner, None)


def kill_at_exit(process) -> None:
    """SIGKILL a ``multiprocessing`` process still alive when this interpreter exits."""
    stop_at_exit(process, kill)


def kill(process) -> None:
    """SIGKILL ``process`` if it is alive, and reap it."""
    if process.is_alive():
        process.kill()
        process.join(KILL_JOIN_S)


def terminate(popen, timeout: float) -> int:
    """SIGTERM a ``subprocess.Popen`` still running, give it ``timeout`` seconds to finish (a server
    drains its requests), then SIGKILL it; reaps it and returns its exit status."""
    if popen.poll() is None:
        popen.send_signal(signal.SIGTERM)
        try:
            popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            popen.kill()
            popen.wait()
    return popen.returncode


def _stop_all() -> None:
    for owner, stop in list(_stop_at_exit.items()):
        try:
            stop(owner)
        except Exception:  # one that fails must not leave the others running
            log.exception("stopping %r at exit failed", owner)
