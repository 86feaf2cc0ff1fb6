"""Prefill/decode disaggregation through a real gateway in front of real ``chassis serve`` replicas
(CPU, fp32): the same tokens as mixed serving, and no request lost that had not started streaming
when its prefill or its decode replica is killed (kill -9)."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from engine.testing.step_gate import StepGate
from gateway.bench.cluster import Cluster, cpu_replica
from measurement import StreamTimer, atime_stream
from tests.support.waiting import async_wait_until

pytestmark = pytest.mark.slow

SERVE_ARGS = ["--max-num-seqs", "8", "--engine-in-thread"]
GATEWAY_SETTINGS = {
    "health_interval_s": 0.5,
    "kv_poll_interval_s": 0.05,
    "circuit_breaker": {"failure_threshold": 2, "min_eject_s": 0.5},
}
IN_FLIGHT = 4


def _system(i: int) -> str:
    """~300 tokens of made-up words (many 16-token blocks), different per i from the first block."""
    return f"document {i}: " + " ".join(f"w{(i * 7 + j * 13) % 97}x{j % 11}" for j in range(90))


def chat_body(i: int, stream: bool = False, max_tokens: int = 8) -> dict:
    messages = [{"role": "system", "content": _system(i)}, {"role": "user", "content": f"question {i}"}]
    return {
        "model": "tiny",
        "messages": messages,
        "max_tokens": max_tokens,
        "temperature": 0,
        "ignore_eos": True,
        "stream": stream,
        **({"stream_options": {"include_usage": True}} if stream else {}),
    }


def _metric(url: str, name: str, **labels: str) -> float:
    text = httpx.get(f"{url}/metrics", timeout=5).text
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items())
    )


def _queued(url: str) -> float:
    return _metric(url, "vllm:num_requests_running") + _metric(url, "vllm:num_requests_waiting")


def _text(url: str, body: dict) -> str:
    response = httpx.post(
        f"{url}/v1/chat/completions", json={**body, "stream": False, "stream_options": None}, timeout=120
    )
    assert response.status_code == 200, response.text
    return response.json()["choices"][0]["message"]["content"]


async def _stream(client: httpx.AsyncClient, url: str, body: dict):
    async with client.stream("POST", f"{url}/v1/chat/completions", json=body) as response:
        assert response.status_code == 200, await response.aread()
        return await atime_stream(response.aiter_lines(), StreamTimer())


@pytest.fixture
def cluster_factory(tiny_checkpoint, tmp_path):
    clusters: list[Cluster] = []

    def start(roles: tuple[str, ...], replica_env: dict | None = None) -> Cluster:
        cluster = Cluster(
            tiny_checkpoint,
            tmp_path / f"cluster-{len(clusters)}",
            policy="cache_aware",
            serve_args=SERVE_ARGS,
            gateway_settings=GATEWAY_SETTINGS,
            roles=roles,
            replica_env=replica_env or {},
        )
        clusters.append(cluster)
        return cluster.start(len(roles))

    yield start
    for cluster in clusters:
        cluster.stop()


def test_disaggregated_answers_equal_mixed_serving_token_for_token(
    cluster_factory, tiny_checkpoint, tmp_path
):
    cluster = cluster_factory(("prefill", "decode"))
    gateway = cluster.gateway.url
    bodies = [chat_body(i, max_tokens=12) for i in range(3)]
    with cpu_replica(tiny_checkpoint, "tiny", tmp_path, *SERVE_ARGS) as mixed:
        expected = [_text(mixed.url, body) for body in bodies]
    for body, want in zip(bodies, expected, strict=True):
        response = httpx.post(f"{gateway}/v1/chat/completions", json=body, timeout=120)
        assert response.status_code == 200, response.text
        assert response.headers["x-chassis-replica"] == "r1"  # the decode replica answers
        reply = response.json()
        assert reply["choices"][0]["message"]["content"] == want
        assert reply["usage"]["prompt_tokens_details"]["cached_tokens"] >= 16 * 15  # onloaded KV

    async def streamed():
        async with httpx.AsyncClient(timeout=120) as client:
            streams = [chat_body(i, stream=True, max_tokens=12) for i in range(len(bodies))]
            return await asyncio.gather(*(_stream(client, gateway, body) for body in streams))

    assert [record.text for record in asyncio.run(streamed())] == expected
    assert _metric(gateway, "chassis_gateway_prefill_phases_total", outcome="ok") == 2 * len(bodies)
    decode_hits = _metric(cluster.replicas[1].url, "chassis_kv_tier_hit_tokens_total", tier="shared")
    assert decode_hits >= len(bodies) * 16 * 15  # the KV came through the shared tier


def _kill_mid_request(cluster: Cluster, gate: StepGate, victim: int) -> list:
    """IN_FLIGHT streamed requests, all held by the gate on replica ``victim`` before their first
    token; kill -9 ``victim`` once it holds them all; every one must still complete."""
    gateway = cluster.gateway.url
    gate.hold_at(0)  # no step at all on the gated replica: nothing of any answer exists yet

    async def run():
        async with httpx.AsyncClient(timeout=120) as client:
            tasks = [
                asyncio.create_task(_stream(client, gateway, chat_body(i, stream=True)))
                for i in range(IN_FLIGHT)
            ]
            url = cluster.replicas[victim].url
            await async_wait_until(
                lambda: _queued(url) == IN_FLIGHT, f"r{victim} to hold {IN_FLIGHT} requests", poll=0.1
            )
            assert not any(task.done() for task in tasks)  # none has begun to stream
            cluster.replicas[victim].kill()
            return await asyncio.gather(*tasks)

    records = asyncio.run(run())
    assert all(r.done and r.error is None and r.output_tokens == 8 for r in records), records
    return records


def test_killing_the_prefill_replica_loses_no_request(cluster_factory, tmp_path):
    gate = StepGate(tmp_path / "prefill-gate")
    cluster = cluster_factory(("prefill", "decode"), {0: gate.env})
    records = _kill_mid_request(cluster, gate, victim=0)
    gateway, decode = cluster.gateway.url, cluster.replicas[1].url
    # The decode replica prefilled them itself, with the tokens it gives without a prefill phase.
    assert [r.text for r in records] == [_text(decode, chat_body(i)) for i in range(IN_FLIGHT)]
    assert _metric(gateway, "chassis_gateway_prefill_phases_total", outcome="connect") == IN_FLIGHT


def test_killing_the_decode_replica_loses_no_request(cluster_factory, tmp_path):
    gate = StepGate(tmp_path / "decode-gate")
    cluster = cluster_factory(("prefill", "decode"), {1: gate.env})
    records = _kill_mid_request(cluster, gate, victim=1)
    gateway, prefill = cluster.gateway.url, cluster.replicas[0].url
    # With no decode replica left the prefill replica serves the retries whole.
    assert [r.text for r in records] == [_text(prefill, chat_body(i)) for i in range(IN_FLIGHT)]
    assert _metric(gateway, "chassis_gateway_prefill_phases_total", outcome="ok") == IN_FLIGHT
    assert _metric(gateway, "chassis_gateway_retries_total") == IN_FLIGHT
