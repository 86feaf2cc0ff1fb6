"""``chassis serve --ep 2 --dp 2`` on CPU (gloo, real rank processes): one API for both ranks, the
expert-parallel metrics, and a rank killed mid-stream ending the replica cleanly (non-zero exit
naming the rank, no process left behind) for its supervisor (the control plane's agent) to relaunch."""

from __future__ import annotations

import json
import os
import signal
import threading

import httpx
import psutil
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.replicas import API_KEY, MODEL, start_replica
from tests.support.waiting import wait_until

DEATH_NOTICED_S = 10.0
HEADERS = {"Authorization": f"Bearer {API_KEY}"}


@pytest.fixture
def serve_ep2(tiny_models, tmp_path):
    replica = start_replica(
        tiny_models["qwen3_moe"], tmp_path, "--ep", "2", "--dp", "2", "--drain-timeout", "5"
    )
    children = psutil.Process(replica.process.pid).children(recursive=True)
    yield replica, children
    if replica.process.poll() is None:
        replica.process.kill()
        replica.process.wait(10)
    for child in children:
        if child.is_running():
            child.kill()


def _complete(url: str, prompt: str, max_tokens: int = 4) -> dict:
    reply = httpx.post(
        f"{url}/v1/completions",
        json={"model": MODEL, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0},
        headers=HEADERS,
        timeout=60,
    )
    assert reply.status_code == 200, reply.text
    return reply.json()


def _samples(url: str) -> dict[str, list]:
    text = httpx.get(f"{url}/metrics", timeout=10).text
    out: dict[str, list] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, []).append(sample)
    return out


def _finish(chunk: dict) -> str | None:
    return (chunk.get("choices") or [{}])[0].get("finish_reason")


def _ranks(server_pid: int) -> list[psutil.Process]:
    """The engine core (rank 0) is the server's spawned child; rank 1 is the engine core's."""
    [core] = [p for p in psutil.Process(server_pid).children() if "spawn_main" in " ".join(p.cmdline())]
    return [p for p in core.children() if "spawn_main" in " ".join(p.cmdline())]


def test_ep2_serves_and_exports_per_rank_expert_load(serve_ep2):
    replica, _ = serve_ep2
    url = replica.base_url
    assert _complete(url, "def main(")["usage"]["completion_tokens"] == 4

    def rank_tokens_reported() -> bool:
        _complete(url, "The quick brown fox")  # keeps the engine loop turning: it re-reads the counts
        samples = _samples(url)
        tokens = [
            s for s in samples.get("chassis_ep_rank_tokens_total", []) if s.labels["model_name"] == MODEL
        ]
        return {s.labels["rank"] for s in tokens} == {"0", "1"} and sum(s.value for s in tokens) > 0

    wait_until(rank_tokens_reported, "per-rank expert load in /metrics", timeout=60, poll=0.5)
    samples = _samples(url)
    [ratio] = samples["chassis_ep_imbalance_ratio"]
    assert ratio.value >= 1.0
    assert [s.value for s in samples["chassis_accelerators"]] == [2.0]


def test_killing_a_rank_mid_stream_ends_the_server_nonzero_naming_it(serve_ep2):
    replica, children = serve_ep2
    [rank1] = _ranks(replica.process.pid)
    first_chunk = threading.Event()
    chunks: list[dict] = []

    def stream() -> None:
        body = {"model": MODEL, "prompt": "def main(", "max_tokens": 400, "stream": True, "ignore_eos": True}
        try:
            with httpx.stream(
                "POST", f"{replica.base_url}/v1/completions", json=body, headers=HEADERS, timeout=60
            ) as r:
                for line in r.iter_lines():
                    if line.startswith("data: {"):
                        chunks.append(json.loads(line[6:]))
                        first_chunk.set()
        except httpx.HTTPError:
            pass  # the server went away mid-stream: what this test does
        first_chunk.set()

    reader = threading.Thread(target=stream, daemon=True)
    reader.start()
    assert first_chunk.wait(60) and chunks, "a first streamed chunk"
    os.kill(rank1.pid, signal.SIGSTOP)  # holds the stream at its next step's collective...
    assert not [c for c in chunks if _finish(c)], "the request is still running"
    os.kill(rank1.pid, signal.SIGKILL)  # ...where the rank then dies
    code = replica.process.wait(DEATH_NOTICED_S)
    assert code != 0
    assert f"expert-parallel rank 1 of 2 (pid {rank1.pid}) was killed by SIGKILL" in replica.log()
    reader.join(DEATH_NOTICED_S)
    assert "length" not in [_finish(c) for c in chunks]
    wait_until(
        lambda: not [p for p in children if p.is_running() and p.status() != psutil.STATUS_ZOMBIE],
        "every rank and helper process to end with the server",
    )
