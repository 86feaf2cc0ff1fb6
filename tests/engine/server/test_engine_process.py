"""The engine core runs in its own process: the HTTP server stays responsive while it generates,
and a dead core ends the replica (streams get an error, the server exits non-zero, nothing left)."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import threading

import httpx
import psutil

from engine.testing.step_gate import StepGate
from tests.support.ports import free_port
from tests.support.replicas import API_KEY, MODEL, REPO, start_replica, stop_replica
from tests.support.waiting import wait_until

AUTH = {"Authorization": f"Bearer {API_KEY}"}
STREAMS = 16
DEATH_NOTICED_S = 10.0


def _engine_pid(replica) -> int:
    return httpx.get(replica.base_url + "/health").json()["engine_pid"]


def _gone(processes: list[psutil.Process]) -> bool:
    return not [p for p in processes if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]


def test_engine_core_is_a_live_child_of_the_server(replica):
    engine_pid = _engine_pid(replica)
    assert engine_pid != replica.process.pid
    core = psutil.Process(engine_pid)
    assert core.is_running() and core.status() != psutil.STATUS_ZOMBIE
    assert core.ppid() == replica.process.pid


def test_health_answers_while_the_engine_core_generates_16_streams(replica, gate):
    gate.hold_at(2)  # every stream gets 2 tokens; then the test lets the core go one token at a time

    async def main() -> list[int]:
        async with httpx.AsyncClient(base_url=replica.base_url, headers=AUTH, timeout=120) as client:

            async def stream(i: int) -> None:
                body = {
                    "model": MODEL, "prompt": f"story number {i}:", "max_tokens": 400,
                    "ignore_eos": True, "stream": True,
                }  # fmt: skip
                async with client.stream("POST", "/v1/completions", json=body) as response:
                    async for _ in response.aiter_lines():
                        pass

            tasks = [asyncio.create_task(stream(i)) for i in range(STREAMS)]
            try:
                await asyncio.to_thread(
                    wait_until,
                    lambda: httpx.get(replica.base_url + "/health").json()["num_requests_running"] == STREAMS,
                    f"the engine core to hold {STREAMS} streams",
                )
                running = []
                async with httpx.AsyncClient(base_url=replica.base_url, timeout=30) as probe:
                    for tokens in range(3, 3 + 40):
                        gate.hold_at(tokens)  # one more token for every stream: the core is computing
                        health = await probe.get("/health")
                        assert health.status_code == 200
                        running.append(health.json()["num_requests_running"])
                return running
            finally:
                for task in tasks:
                    task.cancel()  # closing the responses aborts the requests
                await asyncio.gather(*tasks, return_exceptions=True)

    assert asyncio.run(main()) == [STREAMS] * 40  # every stream was still generating at every answer


def test_a_killed_engine_core_ends_streams_and_the_server(tiny_checkpoint, tmp_path):
    gate = StepGate(tmp_path / "step-gate")
    gate.hold_at(2)  # the stream cannot finish before the core is killed
    replica = start_replica(tiny_checkpoint, tmp_path, env=gate.env)
    try:
        core = psutil.Process(_engine_pid(replica))
        server_children = psutil.Process(replica.process.pid).children(recursive=True)
        lines: list[str] = []

        def read_stream() -> None:
            body = {"model": MODEL, "prompt": "go", "max_tokens": 400, "ignore_eos": True, "stream": True}
            with httpx.stream(
                "POST", replica.base_url + "/v1/completions", json=body, headers=AUTH, timeout=30
            ) as response:
                for line in response.iter_lines():
                    if line.startswith("data: "):
                        lines.append(line[6:])

        reader = threading.Thread(target=read_stream)
        reader.start()
        wait_until(
            lambda: httpx.get(replica.base_url + "/health").json()["num_requests_running"] == 1,
            "the engine core to hold the stream",
        )
        core.kill()
        reader.join(DEATH_NOTICED_S)
        assert not reader.is_alive(), "the stream hung after the engine core died"
        assert lines[-1] == "[DONE]"
        error = json.loads(lines[-2])["error"]
        assert "engine core died" in error["message"] and "SIGKILL" in error["message"]

        code = replica.process.wait(DEATH_NOTICED_S)
        assert code != 0
        log = replica.log()
        assert f"ending this replica: the engine core process (pid {core.pid}) was killed by SIGKILL" in log
        wait_until(lambda: _gone(server_children), "every process of the server to end")
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
