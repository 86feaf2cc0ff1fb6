"""Operations endpoints: /health, /metrics moving with traffic, KV events, drain and SIGTERM."""

from __future__ import annotations

import signal
import threading

import httpx
import openai

from engine.testing.step_gate import StepGate
from tests.support.replicas import API_KEY, MODEL, scrape, start_replica, stop_replica
from tests.support.waiting import wait_until

AUTH = {"Authorization": f"Bearer {API_KEY}"}
VLLM_NAMES = (
    "vllm:time_to_first_token_seconds_count",
    "vllm:inter_token_latency_seconds_count",
    "vllm:e2e_request_latency_seconds_count",
    "vllm:request_queue_time_seconds_count",
    "vllm:prompt_tokens_total",
    "vllm:generation_tokens_total",
    "vllm:prefix_cache_queries_total",
    "vllm:prefix_cache_hits_total",
    "vllm:num_preemptions_total",
    "vllm:num_requests_running",
    "vllm:num_requests_waiting",
    "vllm:kv_cache_usage_perc",
)


def test_health_is_json(replica):
    response = httpx.get(replica.base_url + "/health")
    assert response.status_code == 200
    assert response.json()["status"] == "ready" and response.json()["model"] == MODEL
    assert response.json()["batch_invariant"] is False


def test_batch_invariant_mode_is_reported_in_health_and_metrics(tiny_checkpoint, tmp_path):
    replica = start_replica(tiny_checkpoint, tmp_path, "--batch-invariant")
    try:
        assert httpx.get(replica.base_url + "/health").json()["batch_invariant"] is True
        assert scrape(replica)["chassis_batch_invariant"] == 1
        completion = openai.OpenAI(base_url=replica.base_url + "/v1", api_key=API_KEY).completions.create(
            model=MODEL, prompt="count to ten", max_tokens=4, temperature=0.0
        )
        assert completion.choices[0].finish_reason in ("length", "stop")
    finally:
        stop_replica(replica)


def test_metrics_names_labels_and_movement(replica, openai_client):
    text = httpx.get(replica.base_url + "/metrics").text
    assert f'vllm:num_requests_running{{model_name="{MODEL}"}}' in text
    before = scrape(replica)
    for name in VLLM_NAMES:
        assert name in before, name
    assert before["chassis_batch_invariant"] == 0
    openai_client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "count to ten"}],
        max_tokens=8,
        extra_body={"ignore_eos": True},
    )
    after = scrape(replica)
    for name in (
        "vllm:time_to_first_token_seconds_count",
        "vllm:inter_token_latency_seconds_count",
        "vllm:e2e_request_latency_seconds_count",
        "vllm:request_queue_time_seconds_count",
        "vllm:prompt_tokens_total",
        "vllm:prefix_cache_queries_total",
        "vllm:request_success_total{length}",
    ):
        assert after[name] > before[name], name
    assert after["vllm:generation_tokens_total"] - before["vllm:generation_tokens_total"] >= 8


def test_kv_snapshot_and_events(replica, openai_client):
    snapshot = httpx.get(replica.base_url + "/kv/snapshot", headers=AUTH).json()
    assert snapshot["replica_id"] == "replica-test" and snapshot["block_size"] == 16
    prompt = "A fresh prompt for the KV event feed: " + "lorem ipsum dolor sit amet " * 8
    openai_client.completions.create(model=MODEL, prompt=prompt, max_tokens=1)
    feed = httpx.get(
        replica.base_url + "/kv/events", params={"after": snapshot["last_seq"]}, headers=AUTH
    ).json()
    assert feed["last_seq"] > snapshot["last_seq"]
    stored = [h for e in feed["events"] if e["type"] == "stored" for h in e["hashes"]]
    assert stored and all(len(h) == 32 for h in stored)
    assert {e["tier"] for e in feed["events"]} == {"device"}  # no tiers below the pool here
    after = httpx.get(replica.base_url + "/kv/snapshot", headers=AUTH).json()
    assert set(stored) <= set(after["hashes"]) and after["tiers"] == {}
    assert httpx.get(replica.base_url + "/kv/events", params={"after": -1}, headers=AUTH).status_code == 400
    assert httpx.get(replica.base_url + "/kv/events").status_code == 401


def test_kv_events_and_snapshot_carry_the_host_tier(tiny_checkpoint, tmp_path):
    """A device pool of 8 blocks: later prompts evict the earlier ones' blocks into host memory."""
    replica = start_replica(
        tiny_checkpoint,
        tmp_path,
        "--num-gpu-blocks",
        "8",
        "--max-model-len",
        "128",
        "--kv-host-cache-mib",
        "16",
    )
    try:
        client = openai.OpenAI(base_url=f"{replica.base_url}/v1", api_key=API_KEY, max_retries=0, timeout=60)
        for i in range(3):
            client.completions.create(model=MODEL, prompt=f"{i} " + "evict me to the host " * 5, max_tokens=1)
        events = httpx.get(replica.base_url + "/kv/events", params={"after": 0}, headers=AUTH).json()[
            "events"
        ]
        offloaded = {h for e in events if (e["type"], e["tier"]) == ("stored", "host") for h in e["hashes"]}
        evicted = {h for e in events if (e["type"], e["tier"]) == ("removed", "device") for h in e["hashes"]}
        assert offloaded and offloaded <= evicted
        snapshot = httpx.get(replica.base_url + "/kv/snapshot", headers=AUTH).json()
        assert set(snapshot["tiers"]) == {"host"} and offloaded == set(snapshot["tiers"]["host"])
        assert not offloaded & set(snapshot["hashes"])
    finally:
        stop_replica(replica)


def _refuses_connections(replica) -> bool:
    try:
        httpx.get(replica.base_url + "/health", timeout=5)
    except httpx.ConnectError:
        return True
    return False


def test_drain_then_sigterm_finishes_in_flight_requests(tiny_checkpoint, tmp_path):
    gate = StepGate(tmp_path / "step-gate")
    replica = start_replica(
        tiny_checkpoint, tmp_path, "--drain-timeout", "30", "--kv-event-capacity", "2", env=gate.env
    )
    try:
        client = openai.OpenAI(base_url=f"{replica.base_url}/v1", api_key=API_KEY, max_retries=0, timeout=60)
        for i in range(3):  # more stored-block events than the ring of 2 keeps
            client.completions.create(
                model=MODEL, prompt=f"{i} " + "fill the ring with blocks " * 10, max_tokens=1
            )
        gone = httpx.get(replica.base_url + "/kv/events", params={"after": 0}, headers=AUTH)
        assert gone.status_code == 410 and "snapshot" in gone.json()["error"]["message"]

        gate.hold_at(1)  # the stream stays in flight until the test lets it finish
        # logprobs: the first token gets a chunk even if its text is still incomplete.
        stream = client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "go"}], max_tokens=300, stream=True,
            logprobs=True, extra_body={"ignore_eos": True},
        )  # fmt: skip
        first = next(iter(stream))
        assert first.choices[0].delta.role == "assistant"
        result: dict = {}

        def finish_stream() -> None:
            chunks = list(stream)
            result["finish"] = [c.choices[0].finish_reason for c in chunks if c.choices][-1]

        reader = threading.Thread(target=finish_stream)
        reader.start()

        drained = httpx.post(replica.base_url + "/admin/drain", headers=AUTH)
        assert drained.status_code == 200 and drained.json()["status"] == "draining"
        health = httpx.get(replica.base_url + "/health")
        assert health.status_code == 503 and health.json()["status"] == "draining"
        refused = httpx.post(
            replica.base_url + "/v1/chat/completions", headers=AUTH,
            json={"model": MODEL, "messages": [{"role": "user", "content": "hi"}]},
        )  # fmt: skip
        assert refused.status_code == 503 and "draining" in refused.json()["error"]["message"]

        replica.process.send_signal(signal.SIGTERM)
        wait_until(lambda: _refuses_connections(replica), "the server to stop accepting after SIGTERM")
        # SIGTERM waits for the stream in flight ...
        assert reader.is_alive() and replica.process.poll() is None
        gate.open()
        reader.join(timeout=60)
        assert result.get("finish") == "length"  # all 300 tokens arrived
        # ... and then uvicorn re-raises the signal (exit -15).
        assert replica.process.wait(timeout=60) in (0, -signal.SIGTERM)
    finally:
        stop_replica(replica)
