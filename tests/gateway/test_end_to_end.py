"""The gateway in front of real ``chassis serve`` replicas of the tiny model (real processes)."""

from __future__ import annotations

import asyncio
import threading

import httpx
import openai
import pytest

from engine.testing.step_gate import StepGate
from gateway.bench.cluster import Cluster
from gateway.bench.replay import replay
from gateway.bench.workload import WorkloadShape, build_workload
from gateway.chain import prompt_hash_chain
from gateway.prompt import prompt_token_ids
from tests.support.waiting import wait_until

pytestmark = pytest.mark.slow

# ~500-token prefixes: the test model's context is 1,024 tokens (the bench's model has 4,096).
SHORT = {"popular_words": 120, "document_words": 110, "conversation_system_words": 100, "unique_words": 100}
GATEWAY_SETTINGS = {
    "health_interval_s": 0.5,
    "kv_poll_interval_s": 0.05,
    "circuit_breaker": {"failure_threshold": 2, "min_eject_s": 0.5},
}


@pytest.fixture(scope="module")
def model_dir(tiny_checkpoint):
    return tiny_checkpoint


@pytest.fixture(scope="module")
def replicas_gate(tmp_path_factory) -> StepGate:
    """One step gate for every replica of the cluster (engine/testing/step_gate.py); open by default."""
    return StepGate(tmp_path_factory.mktemp("gate") / "step-gate")


@pytest.fixture(scope="module")
def cluster(model_dir, tmp_path_factory, replicas_gate):
    # 96 KV blocks of 16 tokens: a few ~600-token prompts fill a replica, so blocks get evicted.
    # The engine in the server's thread: one process per replica to start and to kill, which is all
    # the gateway sees either way (tests/engine/server covers the engine process).
    c = Cluster(
        model_dir,
        tmp_path_factory.mktemp("cluster"),
        policy="cache_aware",
        serve_args=["--num-gpu-blocks", "96", "--max-num-seqs", "8", "--engine-in-thread"],
        gateway_settings=GATEWAY_SETTINGS,
    )
    try:
        with pytest.MonkeyPatch.context() as patch:  # the replica processes inherit the gate's location
            for name, value in replicas_gate.env.items():
                patch.setenv(name, value)
            c.start(3)
        yield c
    finally:
        c.stop()


def gateway_state(cluster) -> dict:
    return httpx.get(f"{cluster.gateway.url}/gateway/state").json()["models"][0]


def chat_body(system: str, user: str = "hello", **extra) -> dict:
    messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
    return {"model": "tiny", "messages": messages, "max_tokens": 4, "temperature": 0, **extra}


def test_openai_sdk_streams_chunk_by_chunk_through_the_gateway(cluster, replicas_gate):
    client = openai.OpenAI(base_url=f"{cluster.gateway.url}/v1", api_key="unused", timeout=60)
    request = {
        "model": "tiny",
        "messages": [{"role": "user", "content": "Count to ten."}],
        "max_tokens": 24,
        "temperature": 0,
        "extra_body": {"ignore_eos": True},
    }
    replicas_gate.hold_at(1)  # the first token only: nothing is sent before it exists
    try:
        # logprobs: every token gets a chunk of its own, even one whose text is still incomplete.
        stream = client.chat.completions.create(**request, stream=True, logprobs=True)
        first = next(stream)  # the role rides on the first token's chunk
        assert first.choices[0].delta.role == "assistant" and len(first.choices[0].logprobs.content) == 1
        text = [first.choices[0].delta.content or ""]
        for k in range(2, 25):
            replicas_gate.hold_at(k)  # token k may be generated, token k + 1 may not
            chunk = next(stream)  # so token k reached the SDK on its own, through the gateway
            assert len(chunk.choices[0].logprobs.content) == 1
            text.append(chunk.choices[0].delta.content or "")
        assert chunk.choices[0].finish_reason == "length" and list(stream) == []
    finally:
        replicas_gate.open()
    # The same request straight to a replica gives the same text (temperature 0).
    direct = openai.OpenAI(base_url=f"{cluster.replicas[0].url}/v1", api_key="unused", timeout=60)
    reply = direct.chat.completions.create(**request)
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

        def replica_hashes_once_the_index_matches(i=i, replica=replica):
            ours = set(httpx.get(f"{cluster.gateway.url}/gateway/kv/tiny/r{i}").json()["hashes"])
            theirs = set(httpx.get(f"{replica.url}/kv/snapshot").json()["hashes"])
            return theirs if ours == theirs else None

        theirs = wait_until(replica_hashes_once_the_index_matches, f"the gateway's index of r{i} to match it")
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

    def r1_routable():
        r1 = next(r for r in gateway_state(cluster)["replicas"] if r["id"] == "r1")
        return r1 if r1["routable"] else None

    assert wait_until(r1_routable, "the gateway to readmit r1")["breaker"] == "closed"
    served = {
        httpx.post(
            f"{cluster.gateway.url}/v1/chat/completions", json=chat_body(f"fresh {i}"), timeout=60
        ).headers["x-chassis-replica"]
        for i in range(12)
    }
    assert "r1" in served  # takes traffic again
