"""Process supervision with real processes: how a child ended, children stopped when their parent's
interpreter exits, and a child that exits once orphaned."""

from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from engine.executor.supervision import ORPHAN_EXIT_CODE, describe_exit

REPO = Path(__file__).resolve().parents[3]
GONE_WITHIN_S = 30.0  # a safety net for a broken build, not a timing assertion


@pytest.mark.parametrize(
    ("exitcode", "text"),
    [
        (0, "exited with code 0"),
        (1, "exited with code 1"),
        (ORPHAN_EXIT_CODE, "exited with code 3"),
        (-signal.SIGKILL, "was killed by SIGKILL"),
        (-signal.SIGSEGV, "was killed by SIGSEGV"),
        (-200, "was killed by signal 200"),  # no such signal name
        (None, "stopped responding"),
    ],
)
def test_describe_exit(exitcode, text):
    assert describe_exit(exitcode) == text


def _sleep_forever() -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    while True:
        time.sleep(60)


def _exit_with(code: int) -> None:
    sys.exit(code)


def test_describe_exit_of_real_processes():
    ctx = multiprocessing.get_context("spawn")
    exits = ctx.Process(target=_exit_with, args=(5,))
    killed = ctx.Process(target=_sleep_forever)
    exits.start()
    killed.start()
    killed.kill()
    exits.join()
    killed.join()
    assert describe_exit(exits.exitcode) == "exited with code 5"
    assert describe_exit(killed.exitcode) == "was killed by SIGKILL"
    assert describe_exit(subprocess.run([sys.executable, "-c", "import os; os.abort()"]).returncode) == (
        "was killed by SIGABRT"
    )


PREAMBLE = """
import multiprocessing, os, signal, sys, time
from engine.executor import supervision

def sleep_forever(ready, watch_parent=False):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # as engine cores and ranks do
    if watch_parent:
        supervision.exit_when_orphaned()
    ready.send("running")
    while True:
        time.sleep(60)

def start_child(watch_parent=False):
    ctx = multiprocessing.get_context("spawn")
    ready_r, ready_w = ctx.Pipe(duplex=False)
    child = ctx.Process(target=sleep_forever, args=(ready_w, watch_parent))
    child.start()
    ready_w.close()
    assert ready_r.recv() == "running"
    print("child", child.pid, flush=True)
    return child

if __name__ == "__main__":
"""


def _run_script(tmp_path: Path, main: str) -> subprocess.CompletedProcess:
    """Run ``main`` as a script's main block (a file: spawned children re-import their parent's
    functions from it)."""
    script = tmp_path / "parent.py"
    script.write_text(PREAMBLE + textwrap.indent(textwrap.dedent(main), "    "))
    return subprocess.run(
        [sys.executable, str(script)],
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=GONE_WITHIN_S,
    )


def _pids(stdout: str, tag: str) -> list[int]:
    return [int(line.split()[1]) for line in stdout.splitlines() if line.startswith(tag)]


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_children_registered_are_killed_when_the_interpreter_exits(tmp_path):
    """A non-daemon child that ignores SIGTERM: without the exit hook, ``multiprocessing``'s own would
    join it forever and the parent would never exit."""
    done = _run_script(
        tmp_path,
        """
        child = start_child()
        supervision.kill_at_exit(child)
        sys.exit(0)
        """,
    )
    assert done.returncode == 0, done.stderr
    [pid] = _pids(done.stdout, "child")
    assert _gone(pid)


def test_each_owner_is_stopped_at_exit_unless_released_first(tmp_path):
    done = _run_script(
        tmp_path,
        """
        class Owner:
            def __init__(self, name):
                self.name = name

            def stop(self):
                print("stopped", self.name, flush=True)
                raise RuntimeError("a failing stop must not keep the next one from running")

        kept, released = Owner(1), Owner(2)
        supervision.stop_at_exit(kept, Owner.stop)
        supervision.stop_at_exit(released, Owner.stop)
        supervision.release_at_exit(released)
        other = Owner(3)
        supervision.stop_at_exit(other, Owner.stop)
        """,
    )
    assert done.returncode == 0, done.stderr
    assert sorted(_pids(done.stdout, "stopped")) == [1, 3]
    assert done.stderr.count("RuntimeError: a failing stop") == 2


def test_a_child_exits_once_its_parent_is_gone(tmp_path):
    """The parent dies without any cleanup (os._exit, as after SIGKILL); its child notices."""
    done = _run_script(
        tmp_path,
        """
        start_child(watch_parent=True)
        os._exit(0)
        """,
    )
    [pid] = _pids(done.stdout, "child")
    deadline = time.monotonic() + GONE_WITHIN_S
    while not _gone(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _gone(pid)
