"""What the routing bench records of one streamed reply, on scripted SSE bodies (no replica)."""

import asyncio
import json

import httpx
from starlette.applications import Starlette
from starlette.responses import StreamingResponse
from starlette.routing import Route

from gateway.bench.replay import _one_request
from gateway.bench.workload import Session, Turn
from gateway.proxy import REPLICA_HEADER

USAGE = {"prompt_tokens": 40, "completion_tokens": 2, "prompt_tokens_details": {"cached_tokens": 32}}


def chunk(delta: dict, finish: str | None = None, usage: dict | None = None) -> str:
    body = {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}] if delta else []}
    return "data: " + json.dumps({**body, **({"usage": usage} if usage else {})}) + "\n\n"


def record_of(lines: list[str]):
    async def completions(request):
        return StreamingResponse(iter(lines), media_type="text/event-stream", headers={REPLICA_HEADER: "r1"})

    app = Starlette(routes=[Route("/v1/chat/completions", completions, methods=["POST"])])
    session = Session("s1", "unique", "be brief", [Turn("hi")])

    async def run():
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app)) as client:
            return await _one_request(client, "http://replica", "m", session, [], max_tokens=2)

    return asyncio.run(run())


def test_a_reply_is_timed_from_its_content_and_its_usage_read():
    result, reply = record_of(
        [
            chunk({"role": "assistant", "content": ""}),
            chunk({"content": "Hel"}),
            chunk({"content": "lo"}, finish="length"),
            chunk({}, usage=USAGE),
            "data: [DONE]\n\n",
        ]
    )
    assert result.ok and result.error is None and result.streamed
    assert reply == "Hello" and result.replica == "r1"
    assert (result.prompt_tokens, result.cached_tokens) == (40, 32)
    assert result.ttft_s is not None and result.ttft_s <= result.latency_s


def test_a_reply_that_is_only_end_of_sequence_counts_its_finish_chunk():
    result, reply = record_of(
        [
            chunk({"role": "assistant", "content": ""}),
            chunk({"content": ""}, finish="stop"),
            "data: [DONE]\n\n",
        ]
    )
    assert result.ok and reply == "" and result.ttft_s <= result.latency_s


def test_a_stream_without_any_token_fails():
    result, _ = record_of([chunk({"role": "assistant", "content": ""}), "data: [DONE]\n\n"])
    assert not result.ok and result.error == "stream ended without a token" and result.ttft_s is None


def test_an_error_event_fails_the_request():
    result, reply = record_of([chunk({"content": "x"}), 'data: {"error": {"message": "engine died"}}\n\n'])
    assert not result.ok and "engine died" in result.error
