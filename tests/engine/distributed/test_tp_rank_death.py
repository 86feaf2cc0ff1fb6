"""A dead tensor-parallel rank ends the replica within seconds, naming the rank; a stopped replica
leaves no rank process behind. Real processes throughout: ``chassis serve --tp 2`` on CPU (gloo).

The process tree: the server (HTTP front end) starts the engine core process, which is rank 0 and
starts rank 1. Killing any of the three ends the replica and leaves nothing running."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import httpx
import psutil
import pytest

from engine import LLM
from engine.executor.tensor_parallel import RankFailure
from engine.sampling.params import SamplingParams
from tests.support.replicas import API_KEY, MODEL, start_replica
from tests.support.waiting import wait_until

DEATH_NOTICED_S = 10.0  # a dead rank ends the replica within this (the deadline of the waits)


def _start_serve(model_dir: Path, log_dir: Path) -> tuple[subprocess.Popen, str, Path]:
    replica = start_replica(model_dir, log_dir, "--tp", "2", "--drain-timeout", "5")
    return replica.process, replica.base_url, replica.log_path


def _spawned(pid: int) -> list[psutil.Process]:
    """Children started through multiprocessing's spawn entry point."""
    return [p for p in psutil.Process(pid).children() if "spawn_main" in " ".join(p.cmdline())]


def _engine_core(server_pid: int) -> psutil.Process:
    [core] = _spawned(server_pid)
    return core


def _rank_processes(server_pid: int) -> list[psutil.Process]:
    """Ranks > 0 are spawned children of the engine core process, which is rank 0."""
    return _spawned(_engine_core(server_pid).pid)


def _gone(processes: list[psutil.Process]) -> bool:
    return not [p for p in processes if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]


@pytest.fixture
def serve_tp2(tiny_qwen3, tmp_path):
    process, url, log_path = _start_serve(tiny_qwen3, tmp_path)
    children = psutil.Process(process.pid).children(recursive=True)
    yield process, url, log_path, children
    if process.poll() is None:
        process.kill()
        process.wait(10)
    for child in children:  # never leave a rank behind, even when the test failed
        if child.is_running():
            child.kill()


def test_killing_a_rank_ends_the_server_nonzero_naming_the_rank(serve_tp2):
    process, url, log_path, children = serve_tp2
    reply = httpx.post(
        f"{url}/v1/completions",
        json={"model": MODEL, "prompt": "def main(", "max_tokens": 4},
        headers={"Authorization": f"Bearer {API_KEY}"},
        timeout=60,
    )
    assert reply.status_code == 200 and reply.json()["usage"]["completion_tokens"] == 4
    [rank1] = _rank_processes(process.pid)
    os.kill(rank1.pid, signal.SIGKILL)
    code = process.wait(DEATH_NOTICED_S)
    assert code != 0
    log = log_path.read_text(errors="replace")
    assert f"tensor-parallel rank 1 of 2 (pid {rank1.pid}) was killed by SIGKILL" in log
    wait_until(lambda: _gone(children), "every rank and helper process to end with the server")


def test_sigterm_stops_every_rank_cleanly(serve_tp2):
    process, url, log_path, children = serve_tp2
    assert httpx.get(f"{url}/health").json()["engine_pid"] == _engine_core(process.pid).pid
    assert len(_rank_processes(process.pid)) == 1
    process.send_signal(signal.SIGTERM)
    code = process.wait(30)
    log = log_path.read_text(errors="replace")
    assert code in (0, -signal.SIGTERM), log[-3000:]  # uvicorn re-raises the stop signal it handled
    wait_until(lambda: _gone(children), "every rank and helper process to end with the server")
    assert "cannot continue" not in log and "ending this replica" not in log


def test_offline_engine_raises_rank_failure_after_a_rank_dies(tiny_qwen3):
    with LLM(tiny_qwen3, device="cpu", tensor_parallel_size=2) as llm:
        [pid] = llm.engine.runner.rank_pids.values()
        os.kill(pid, signal.SIGKILL)
        with pytest.raises(RankFailure, match=rf"rank 1 of 2 \(pid {pid}\) was killed by SIGKILL"):
            for _ in range(100):  # the watchdog may not have seen it yet: the collective fails too
                llm.generate("def main(", SamplingParams(max_tokens=2))


def test_killing_rank0_ends_the_server_nonzero_and_rank1(serve_tp2):
    process, _url, log_path, children = serve_tp2
    core = _engine_core(process.pid)
    ranks = _rank_processes(process.pid)
    assert len(ranks) == 1
    core.kill()
    code = process.wait(DEATH_NOTICED_S)
    assert code != 0
    log = log_path.read_text(errors="replace")
    assert f"ending this replica: the engine core process (pid {core.pid}) was killed by SIGKILL" in log
    wait_until(lambda: _gone(children), "rank 1 and every helper process to end with rank 0")


def test_killing_the_server_leaves_no_orphan_rank(serve_tp2):
    process, _url, _log_path, children = serve_tp2
    core = _engine_core(process.pid)
    ranks = _rank_processes(process.pid)
    assert len(ranks) == 1
    process.kill()
    process.wait(10)
    wait_until(lambda: _gone([core, *ranks]), "the engine core and rank 1 to end with the server")
