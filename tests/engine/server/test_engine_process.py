"""The engine core runs in its own process: the HTTP server stays responsive while it generates,
and a dead core ends the replica (streams get an error, the server exits non-zero, nothing left)."""

from __future__ import annotations

import asyncio
import json
import signal
import statistics
import subprocess
import sys
import threading
import time

import httpx
import psutil

from tests.support.replicas import API_KEY, MODEL, REPO, free_port, start_replica, stop_replica

AUTH = {"Authorization": f"Bearer {API_KEY}"}
STREAMS = 16
HEALTH_P50_LIMIT_S = 0.050
DEATH_NOTICED_S = 10.0


def _engine_pid(replica) -> int:
    return httpx.get(replica.base_url + "/health").json()["engine_pid"]


def _gone(processes: list[psutil.Process], within: float) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not [p for p in processes if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]:
            return True
        time.sleep(0.1)
    return False


def test_engine_core_is_a_live_child_of_the_server(replica):
    engine_pid = _engine_pid(replica)
    assert engine_pid != replica.process.pid
    core = psutil.Process(engine_pid)
    assert core.is_running() and core.status() != psutil.STATUS_ZOMBIE
    assert core.ppid() == replica.process.pid


def test_health_answers_fast_while_16_streams_generate(replica):
    async def main() -> tuple[list[float], list[int]]:
        async with httpx.AsyncClient(base_url=replica.base_url, headers=AUTH, timeout=120) as client:
            started = [asyncio.Event() for _ in range(STREAMS)]
            stop = asyncio.Event()

            async def stream(i: int) -> None:
                body = {
                    "model": MODEL, "prompt": f"story number {i}:", "max_tokens": 400,
                    "ignore_eos": True, "stream": True,
                }  # fmt: skip
                async with client.stream("POST", "/v1/completions", json=body) as response:
                    chunks = 0
                    async for line in response.aiter_lines():
                        chunks += line.startswith("data: {")
                        if chunks == 2:
                            started[i].set()
                        if stop.is_set():
                            return  # closing the response aborts the request

            tasks = [asyncio.create_task(stream(i)) for i in range(STREAMS)]
            await asyncio.wait_for(asyncio.gather(*(e.wait() for e in started)), timeout=60)
            latencies, running = [], []
            async with httpx.AsyncClient(base_url=replica.base_url, timeout=10) as probe:
                for _ in range(40):
                    t0 = time.perf_counter()
                    health = await probe.get("/health")
                    latencies.append(time.perf_counter() - t0)
                    running.append(health.json()["num_requests_running"])
                    await asyncio.sleep(0.02)
            stop.set()
            await asyncio.gather(*tasks)
            return latencies, running

    latencies, running = asyncio.run(main())
    p50 = statistics.median(latencies)
    print(
        f"/health p50 {p50 * 1000:.1f} ms, max {max(latencies) * 1000:.1f} ms while {STREAMS} streams generate"
    )
    assert min(running) > 0, "the streams finished before the measurement ended"
    assert p50 < HEALTH_P50_LIMIT_S, f"/health p50 {p50 * 1000:.1f} ms"


def test_a_killed_engine_core_ends_streams_and_the_server(tiny_checkpoint, tmp_path):
    replica = start_replica(tiny_checkpoint, tmp_path)
    try:
        core = psutil.Process(_engine_pid(replica))
        server_children = psutil.Process(replica.process.pid).children(recursive=True)
        lines: list[str] = []
        first_chunk = threading.Event()

        def read_stream() -> None:
            body = {"model": MODEL, "prompt": "go", "max_tokens": 400, "ignore_eos": True, "stream": True}
            with httpx.stream(
                "POST", replica.base_url + "/v1/completions", json=body, headers=AUTH, timeout=30
            ) as response:
                for line in response.iter_lines():
                    if line.startswith("data: "):
                        lines.append(line[6:])
                        first_chunk.set()

        reader = threading.Thread(target=read_stream)
        reader.start()
        assert first_chunk.wait(60)
        killed_at = time.monotonic()
        core.kill()
        reader.join(DEATH_NOTICED_S)
        assert not reader.is_alive(), "the stream hung after the engine core died"
        assert lines[-1] == "[DONE]"
        error = json.loads(lines[-2])["error"]
        assert "engine core died" in error["message"] and "SIGKILL" in error["message"]

        code = replica.process.wait(DEATH_NOTICED_S)
        assert time.monotonic() - killed_at < DEATH_NOTICED_S
        assert code != 0
        log = replica.log()
        assert f"ending this replica: the engine core process (pid {core.pid}) was killed by SIGKILL" in log
        assert _gone(server_children, within=5.0), "a process outlived the server"
    finally:
        stop_replica(replica)


def test_an_engine_that_cannot_load_ends_the_server_nonzero(tiny_checkpoint, tmp_path):
    log_path = tmp_path / "serve.log"
    cmd = [
        sys.executable, "-m", "chassis", "serve", str(tiny_checkpoint), "--port", str(free_port()),
        "--device", "cpu", "--max-model-len", "1000000",
    ]  # fmt: skip
    with log_path.open("wb") as log:
        process = subprocess.Popen(cmd, cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
    try:
        code = process.wait(120)
    finally:
        if process.poll() is None:
            process.kill()
    text = log_path.read_text(errors="replace")
    assert code != 0, text[-3000:]
    assert "max_model_len=1000000 exceeds the model's max_position_embeddings" in text


def test_engine_in_thread_serves_from_the_server_process(tiny_checkpoint, tmp_path):
    replica = start_replica(tiny_checkpoint, tmp_path, "--engine-in-thread")
    try:
        assert _engine_pid(replica) == replica.process.pid
        reply = httpx.post(
            replica.base_url + "/v1/completions",
            json={"model": MODEL, "prompt": "hello", "max_tokens": 3, "ignore_eos": True},
            headers=AUTH,
            timeout=60,
        )
        assert reply.status_code == 200 and reply.json()["usage"]["completion_tokens"] == 3
    finally:
        assert stop_replica(replica) in (0, -signal.SIGTERM)
