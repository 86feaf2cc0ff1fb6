"""The gateway in front of real ``chassis serve`` replicas of the tiny model (real processes)."""

from __future__ import annotations

import asyncio
import threading
import time

import httpx
import openai
import pytest

from gateway.bench.cluster import Cluster
from gateway.bench.replay import replay
from gateway.bench.workload import WorkloadShape, build_workload
from gateway.chain import prompt_hash_chain
from gateway.prompt import prompt_token_ids

pytestmark = pytest.mark.slow

# ~500-token prefixes: the test model's context is 1,024 tokens (the bench's model has 4,096).
SHORT = {"popular_words": 120, "document_words": 110, "conversation_system_words": 100, "unique_words": 100}
GATEWAY_SETTINGS = {
    "health_interval_s": 0.5,
    "kv_poll_interval_s": 0.05,
    "circuit_breaker": {"failure_threshold": 2, "min_eject_s": 0.5},
}


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    from engine.testing.tiny_model import make_tiny_model

    return make_tiny_model(tmp_path_factory.mktemp("tiny") / "tiny", arch="qwen3", seed=0)


@pytest.fixture(scope="module")
def cluster(model_dir, tmp_path_factory):
    # 96 KV blocks of 16 tokens: a few ~600-token prompts fill a replica, so blocks get evicted.
    c = Cluster(
        model_dir,
        tmp_path_factory.mktemp("cluster"),
        policy="cache_aware",
        serve_args=["--num-gpu-blocks", "96", "--max-num-seqs", "8"],
        gateway_settings=GATEWAY_SETTINGS,
    )
    try:
        yield c.start(3)
    finally:
        c.stop()


def gateway_state(cluster) -> dict:
    return httpx.get(f"{cluster.gateway.url}/gateway/state").json()["models"][0]


def chat_body(system: str, user: str = "hello", **extra) -> dict:
    messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
    return {"model": "tiny", "messages": messages, "max_tokens": 4, "temperature": 0, **extra}


def test_openai_sdk_streams_chunk_by_chunk_through_the_gateway(cluster):
    client = openai.OpenAI(base_url=f"{cluster.gateway.url}/v1", api_key="unused")
    start = time.perf_counter()
    arrivals, text = [], []
    stream = client.chat.completions.create(
        model="tiny",
        messages=[{"role": "user", "content": "Count to ten."}],
        max_tokens=24,
        temperature=0,
        stream=True,
    )
    for chunk in stream:
        arrivals.append(time.perf_counter() - start)
        if chunk.choices:
            text.append(chunk.choices[0].delta.content or "")
    assert len(arrivals) >= 10  # one chunk per token or so, not one buffered blob
    assert arrivals[-1] - arrivals[1] > 0.01  # spread out in time as the replica produced them
    # The same request straight to a replica gives the same text (temperature 0).
    direct = openai.OpenAI(base_url=f"{cluster.replicas[0].url}/v1", api_key="unused")
    reply = direct.chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": "Count to ten."}], max_tokens=24, temperature=0
    )
    assert "".join(text) == reply.choices[0].message.content


def test_gateway_hashes_prompts_exactly_as_the_replica_and_its_index_matches_after_evictions(
    cluster, model_dir
):
    from engine.tokenizer import Tokenizer

    tokenizer = Tokenizer(model_dir)
    sessions = build_workload(WorkloadShape(requests=30, **SHORT), seed=7)
    body = chat_body(sessions[0].system)
    response = httpx.post(f"{cluster.gateway.url}/v1/chat/completions", json=body, timeout=60)
    assert response.status_code == 200, response.text
    served_by = response.headers["x-chassis-replica"]
    replica = cluster.replicas[int(served_by[1:])]
    chain = prompt_hash_chain(prompt_token_ids(tokenizer, "chat", body), 16)
    snapshot = set(httpx.get(f"{replica.url}/kv/snapshot").json()["hashes"])
    assert len(chain) > 20 and {h.hex() for h in chain} <= snapshot

    # Many distinct long prompts: far more blocks than the replicas hold, so they evict.
    asyncio.run(replay(cluster.gateway.url, "tiny", sessions[1:], concurrency=4, max_tokens=2))
    evicted = False
    for i, replica in enumerate(cluster.replicas):
        deadline = time.monotonic() + 10
        while True:
            ours = set(httpx.get(f"{cluster.gateway.url}/gateway/kv/tiny/r{i}").json()["hashes"])
            theirs = set(httpx.get(f"{replica.url}/kv/snapshot").json()["hashes"])
            if ours == theirs or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert ours == theirs, f"r{i}: {len(ours ^ theirs)} hashes differ"
        evicted |= not {h.hex() for h in chain} <= theirs
        assert len(theirs) <= 96
    assert evicted  # the first prompt's blocks were pushed out somewhere: removals were followed


def test_killing_a_replica_mid_run_fails_no_request_that_had_not_started(cluster):
    sessions = build_workload(WorkloadShape(requests=200, conversation_share=0.0, **SHORT), seed=11)
    done = []
    killed = threading.Event()

    def progress(n: int) -> None:
        done.append(n)
        if n == 40 and not killed.is_set():
            killed.set()
            cluster.replicas[1].kill()

    results = asyncio.run(
        replay(cluster.gateway.url, "tiny", sessions, concurrency=8, max_tokens=4, progress=progress)
    )
    assert killed.is_set() and len(results) == 200
    not_started = [r for r in results if not r.ok and not r.streamed]
    assert not_started == [], not_started[:3]
    failed = [r for r in results if not r.ok]
    assert all(r.replica == "r1" for r in failed)  # only streams already under way on the dead one
    r1 = next(r for r in gateway_state(cluster)["replicas"] if r["id"] == "r1")
    assert r1["ejections"] >= 1 and not r1["routable"]

    cluster.restart_replica(1)  # same port, fresh process, cold cache
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        r1 = next(r for r in gateway_state(cluster)["replicas"] if r["id"] == "r1")
        if r1["routable"]:
            break
        time.sleep(0.2)
    assert r1["routable"] and r1["breaker"] == "closed"
    served = {
        httpx.post(
            f"{cluster.gateway.url}/v1/chat/completions", json=chat_body(f"fresh {i}"), timeout=60
        ).headers["x-chassis-replica"]
        for i in range(12)
    }
    assert "r1" in served  # takes traffic again
