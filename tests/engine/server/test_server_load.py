"""Concurrency and client disconnects against a real replica, observed through /metrics."""

from __future__ import annotations

import asyncio

import httpx
import openai
import pytest

from tests.support.replicas import API_KEY, MODEL, scrape
from tests.support.waiting import wait_until


def metrics_when(replica, condition, what: str) -> dict[str, float]:
    """The replica's metrics once ``condition`` holds for them."""
    return wait_until(lambda: values if condition(values := scrape(replica)) else None, what)


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


def test_disconnected_clients_free_their_kv_blocks(replica, gate):
    idle = metrics_when(replica, lambda v: v["vllm:num_requests_running"] == 0, "an idle replica")
    assert idle["vllm:kv_cache_usage_perc"] == 0
    before = idle
    gate.hold_at(2)  # every request generates 2 tokens, then the engine holds them all

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
        held = await asyncio.to_thread(
            metrics_when, replica, lambda v: v["vllm:num_requests_running"] == 16, "16 requests held"
        )
        for stream in streams:
            await stream.close()
        await client.close()
        return held["vllm:kv_cache_usage_perc"]

    usage_while_open = asyncio.run(main())
    assert usage_while_open > 0
    metrics_when(
        replica,
        lambda v: v["vllm:request_success_total{abort}"] == before["vllm:request_success_total{abort}"] + 16,
        "the server to abort the 16 requests",
    )
    gate.open()
    after = metrics_when(
        replica,
        lambda v: v["vllm:num_requests_running"] == 0 and v["vllm:kv_cache_usage_perc"] == 0,
        "the aborted requests to leave the engine",
    )
    assert after["vllm:num_requests_waiting"] == 0
    aborted = after["vllm:request_success_total{abort}"] - before["vllm:request_success_total{abort}"]
    assert aborted == 16
    # Nowhere near 16 x 400 tokens were generated: the aborts really stopped generation.
    assert after["vllm:generation_tokens_total"] - before["vllm:generation_tokens_total"] < 16 * 400


def test_non_streaming_client_that_gives_up_is_aborted(replica, gate):
    before = metrics_when(replica, lambda v: v["vllm:num_requests_running"] == 0, "an idle replica")
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "a very long answer please"}],
        "max_tokens": 400,
        "ignore_eos": True,
    }
    gate.hold_at(2)  # the answer cannot be ready: the engine holds the request after 2 tokens

    async def give_up_while_the_engine_holds_the_request() -> None:
        async with httpx.AsyncClient(timeout=120) as client:
            request = asyncio.ensure_future(
                client.post(
                    f"{replica.base_url}/v1/chat/completions",
                    json=body,
                    headers={"Authorization": f"Bearer {API_KEY}"},
                )
            )
            await asyncio.to_thread(
                metrics_when, replica, lambda v: v["vllm:num_requests_running"] == 1, "the request held"
            )
            request.cancel()  # the client hangs up before the answer was ready
            with pytest.raises(asyncio.CancelledError):
                await request

    asyncio.run(give_up_while_the_engine_holds_the_request())
    metrics_when(
        replica,
        lambda v: v["vllm:request_success_total{abort}"] > before["vllm:request_success_total{abort}"],
        "the server to abort the request",
    )
    gate.open()
    after = metrics_when(
        replica,
        lambda v: v["vllm:num_requests_running"] == 0 and v["vllm:kv_cache_usage_perc"] == 0,
        "the aborted request to leave the engine",
    )
    assert after["vllm:request_success_total{abort}"] == before["vllm:request_success_total{abort}"] + 1
    assert after["vllm:generation_tokens_total"] - before["vllm:generation_tokens_total"] < 400
