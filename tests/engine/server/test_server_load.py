"""Concurrency and client disconnects against a real replica, observed through /metrics."""

from __future__ import annotations

import asyncio
import time

import httpx
import openai
from prometheus_client.parser import text_string_to_metric_families
from replica_process import API_KEY, MODEL


def scrape(replica) -> dict[str, float]:
    """Sample name (+ finished_reason label) -> value."""
    text = httpx.get(replica.base_url + "/metrics").text
    values = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            reason = sample.labels.get("finished_reason")
            values[f"{sample.name}{{{reason}}}" if reason else sample.name] = sample.value
    return values


def wait_for(replica, condition, timeout: float = 30.0) -> dict[str, float]:
    deadline = time.monotonic() + timeout
    while True:
        values = scrape(replica)
        if condition(values) or time.monotonic() > deadline:
            return values
        time.sleep(0.2)


def test_64_concurrent_streams_all_complete(replica):
    async def main() -> list[tuple[str, str]]:
        client = openai.AsyncOpenAI(
            base_url=f"{replica.base_url}/v1", api_key=API_KEY, max_retries=0, timeout=120
        )

        async def one(i: int) -> tuple[str, str]:
            stream = await client.chat.completions.create(
                model=MODEL,
                messages=[{"role": "user", "content": f"request {i}"}],
                max_tokens=12,
                stream=True,
            )
            text, finish = "", None
            async for chunk in stream:
                if chunk.choices:
                    text += chunk.choices[0].delta.content or ""
                    finish = chunk.choices[0].finish_reason or finish
            return text, finish

        try:
            return await asyncio.gather(*(one(i) for i in range(64)))
        finally:
            await client.close()

    results = asyncio.run(main())
    assert len(results) == 64
    assert all(finish in ("stop", "length") for _, finish in results)
    assert sum(1 for text, _ in results if text) > 0


def test_disconnected_clients_free_their_kv_blocks(replica):
    before = scrape(replica)
    idle = wait_for(replica, lambda v: v["vllm:num_requests_running"] == 0)
    assert idle["vllm:kv_cache_usage_perc"] == 0

    async def main() -> float:
        client = openai.AsyncOpenAI(
            base_url=f"{replica.base_url}/v1", api_key=API_KEY, max_retries=0, timeout=120
        )
        streams = []
        for i in range(16):
            stream = await client.chat.completions.create(
                model=MODEL,
                messages=[{"role": "user", "content": f"a long story, part {i}"}],
                max_tokens=400,
                stream=True,
                extra_body={"ignore_eos": True},
            )
            streams.append(stream)
        for stream in streams:  # read a little of each, so every request is generating
            for _ in range(3):
                await stream.__anext__()
        usage_while_open = (await asyncio.to_thread(scrape, replica))["vllm:kv_cache_usage_perc"]
        for stream in streams:
            await stream.close()
        await client.close()
        return usage_while_open

    usage_while_open = asyncio.run(main())
    assert usage_while_open > 0
    after = wait_for(
        replica, lambda v: v["vllm:num_requests_running"] == 0 and v["vllm:kv_cache_usage_perc"] == 0
    )
    assert after["vllm:num_requests_running"] == 0 and after["vllm:num_requests_waiting"] == 0
    assert after["vllm:kv_cache_usage_perc"] == 0
    aborted = after["vllm:request_success_total{abort}"] - before["vllm:request_success_total{abort}"]
    assert aborted == 16
    # Nowhere near 16 x 400 tokens were generated: the aborts really stopped generation.
    assert after["vllm:generation_tokens_total"] - before["vllm:generation_tokens_total"] < 16 * 400


def test_non_streaming_client_that_gives_up_is_aborted(replica):
    before = scrape(replica)
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "a very long answer please"}],
        "max_tokens": 400,
        "ignore_eos": True,
    }
    try:
        httpx.post(
            f"{replica.base_url}/v1/chat/completions",
            json=body,
            headers={"Authorization": f"Bearer {API_KEY}"},
            timeout=0.5,
        )
    except httpx.ReadTimeout:
        pass  # the client hung up before the answer was ready
    after = wait_for(
        replica,
        lambda v: (
            v["vllm:request_success_total{abort}"] > before["vllm:request_success_total{abort}"]
            and v["vllm:num_requests_running"] == 0
        ),
    )
    assert after["vllm:request_success_total{abort}"] == before["vllm:request_success_total{abort}"] + 1
    assert after["vllm:kv_cache_usage_perc"] == 0
