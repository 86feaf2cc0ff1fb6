"""A dead tensor-parallel rank ends the replica within seconds, naming the rank; a stopped replica
leaves no rank process behind. Real processes throughout: ``chassis serve --tp 2`` on CPU (gloo).

The process tree: the server (HTTP front end) starts the engine core process, which is rank 0 and
starts rank 1. Killing any of the three ends the replica and leaves nothing running."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psutil
import pytest

from engine import LLM
from engine.executor.tensor_parallel import RankFailure
from engine.sampling.params import SamplingParams
from tests.support.ports import free_port

REPO = Path(__file__).resolve().parents[3]
DEATH_NOTICED_S = 10.0


def _start_serve(model_dir: Path, log_path: Path) -> tuple[subprocess.Popen, str]:
    port = free_port()
    cmd = [
        sys.executable, "-m", "chassis", "serve", str(model_dir), "--tp", "2",
        "--host", "127.0.0.1", "--port", str(port), "--device", "cpu", "--dtype", "float32",
        "--max-model-len", "256", "--served-model-name", "tiny", "--replica-id", "tp-death-test", "--drain-timeout", "5",
    ]  # fmt: skip
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            cmd, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"}
        )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"chassis serve exited with {process.returncode}:\n{log_path.read_text()[-3000:]}")
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return process, url
        except httpx.TransportError:
            pass
        time.sleep(0.3)
    process.kill()
    pytest.fail(f"chassis serve --tp 2 not ready in 120 s:\n{log_path.read_text()[-3000:]}")


def _spawned(pid: int) -> list[psutil.Process]:
    """Children started through multiprocessing's spawn entry point."""
    return [p for p in psutil.Process(pid).children() if "spawn_main" in " ".join(p.cmdline())]


def _engine_core(server_pid: int) -> psutil.Process:
    [core] = _spawned(server_pid)
    return core


def _rank_processes(server_pid: int) -> list[psutil.Process]:
    """Ranks > 0 are spawned children of the engine core process, which is rank 0."""
    return _spawned(_engine_core(server_pid).pid)


def _gone(processes: list[psutil.Process], within: float) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not [p for p in processes if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]:
            return True
        time.sleep(0.1)
    return False


@pytest.fixture
def serve_tp2(tiny_qwen3, tmp_path):
    log_path = tmp_path / "serve.log"
    process, url = _start_serve(tiny_qwen3, log_path)
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
        f"{url}/v1/completions", json={"model": "tiny", "prompt": "def main(", "max_tokens": 4}, timeout=60
    )
    assert reply.status_code == 200 and reply.json()["usage"]["completion_tokens"] == 4
    [rank1] = _rank_processes(process.pid)
    killed_at = time.monotonic()
    os.kill(rank1.pid, signal.SIGKILL)
    code = process.wait(DEATH_NOTICED_S)
    assert time.monotonic() - killed_at < DEATH_NOTICED_S
    assert code != 0
    log = log_path.read_text(errors="replace")
    assert f"tensor-parallel rank 1 of 2 (pid {rank1.pid}) was killed by SIGKILL" in log
    assert _gone(children, within=5.0), "a rank or helper process outlived the server"


def test_sigterm_stops_every_rank_cleanly(serve_tp2):
    process, url, log_path, children = serve_tp2
    assert httpx.get(f"{url}/health").json()["engine_pid"] == _engine_core(process.pid).pid
    assert len(_rank_processes(process.pid)) == 1
    process.send_signal(signal.SIGTERM)
    code = process.wait(30)
    log = log_path.read_text(errors="replace")
    assert code in (0, -signal.SIGTERM), log[-3000:]  # uvicorn re-raises the stop signal it handled
    assert _gone(children, within=5.0), "a rank or helper process outlived the server"
    assert "cannot continue" not in log and "ending this replica" not in log


def test_offline_engine_raises_rank_failure_after_a_rank_dies(tiny_qwen3):
    with LLM(tiny_qwen3, device="cpu", tensor_parallel_size=2) as llm:
        [pid] = llm.engine.runner.rank_pids.values()
        os.kill(pid, signal.SIGKILL)
        started = time.monotonic()
        with pytest.raises(RankFailure, match=rf"rank 1 of 2 \(pid {pid}\) was killed by SIGKILL"):
            for _ in range(100):  # the watchdog may not have seen it yet: the collective fails too
                llm.generate("def main(", SamplingParams(max_tokens=2))
        assert time.monotonic() - started < DEATH_NOTICED_S


def test_killing_rank0_ends_the_server_nonzero_and_rank1(serve_tp2):
    process, _url, log_path, children = serve_tp2
    core = _engine_core(process.pid)
    ranks = _rank_processes(process.pid)
    assert len(ranks) == 1
    killed_at = time.monotonic()
    core.kill()
    code = process.wait(DEATH_NOTICED_S)
    assert time.monotonic() - killed_at < DEATH_NOTICED_S
    assert code != 0
    log = log_path.read_text(errors="replace")
    assert f"ending this replica: the engine core process (pid {core.pid}) was killed by SIGKILL" in log
    assert _gone(children, within=5.0), "rank 1 or a helper process outlived rank 0"


def test_killing_the_server_leaves_no_orphan_rank(serve_tp2):
    process, _url, _log_path, children = serve_tp2
    core = _engine_core(process.pid)
    ranks = _rank_processes(process.pid)
    assert len(ranks) == 1
    process.kill()
    process.wait(10)
    assert _gone([core, *ranks], within=5.0), "the engine core or rank 1 outlived the server"
