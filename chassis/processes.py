"""A small supervisor for the child processes that ``chassis up`` (and benchmarks) start.

Children get their own process group so one Ctrl-C stops the whole tree, their output is
prefixed with the child's name, and a child that exits early is reported with its exit code.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Child:
    name: str
    argv: Sequence[str]
    env: dict[str, str] | None = None
    log_path: Path | None = None
    popen: subprocess.Popen | None = field(default=None, repr=False)


class ProcessGroup:
    def __init__(self, echo: bool = True) -> None:
        self.children: list[Child] = []
        self.echo = echo

    def start(self, child: Child, cwd: Path | None = None) -> Child:
        env = {**os.environ, **(child.env or {}), "PYTHONUNBUFFERED": "1"}
        child.popen = subprocess.Popen(
            list(child.argv),
            cwd=cwd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            text=True,
            bufsize=1,
        )
        threading.Thread(target=self._pump, args=(child,), daemon=True).start()
        self.children.append(child)
        return child

    def _pump(self, child: Child) -> None:
        log = child.log_path.open("a", encoding="utf-8") if child.log_path else None
        try:
            for line in child.popen.stdout:
                if log:
                    log.write(line)
                    log.flush()
                if self.echo:
                    sys.stdout.write(f"[{child.name}] {line}")
                    sys.stdout.flush()
        finally:
            if log:
                log.close()

    def exited(self) -> list[Child]:
        return [child for child in self.children if child.popen and child.popen.poll() is not None]

    def stop(self, timeout: float = 15.0) -> None:
        # SIGTERM to the leader only (Celery and uvicorn shut their own children down warmly);
        # the whole group gets SIGKILL if the leader outlives the timeout.
        for child in reversed(self.children):
            if child.popen and child.popen.poll() is None:
                child.popen.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for child in self.children:
            if not child.popen:
                continue
            try:
                child.popen.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(child.popen.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                child.popen.wait()
