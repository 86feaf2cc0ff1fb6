"""How the load generator reads one streamed reply, on scripted SSE bodies (no replica, no Django)."""

import asyncio
import json

import httpx
from controlplane.benchmarks.loadgen import LoadSpec, RequestSample, _stream_chat
from starlette.applications import Starlette
from starlette.responses import StreamingResponse
from starlette.routing import Route

SPEC = LoadSpec(workload="chat-short", requests=1, concurrency=1, max_tokens=3, seed=0, model="m")


def content(text: str) -> str:
    return "data: " + json.dumps({"choices": [{"index": 0, "delta": {"content": text}}]}) + "\n\n"


def stream_into_sample(lines: list[str]) -> tuple[RequestSample, str]:
    async def completions(request):
        return StreamingResponse(iter(lines), media_type="text/event-stream")

    app = Starlette(routes=[Route("/v1/chat/completions", completions, methods=["POST"])])
    sample = RequestSample(index=0, conversation=0, turn=0, start_s=0.0)

    async def run():
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app)) as client:
            return await _stream_chat(client, "http://replica", SPEC, [], sample, t0=0.0)

    return sample, asyncio.run(run())


def test_the_role_chunk_is_not_the_first_token_and_chunks_stand_in_for_missing_usage():
    role = "data: " + json.dumps({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]})
    sample, reply = stream_into_sample(
        [role + "\n\n", content("a"), content("b"), content("c"), "data: [DONE]\n\n"]
    )
    assert sample.ok and reply == "abc"
    assert sample.output_tokens == 3 and len(sample.itl_s) == 2
    assert sample.ttft_s is not None and sample.ttft_s <= sample.latency_s


def test_an_error_event_fails_the_sample():
    sample, reply = stream_into_sample([content("a"), 'data: {"error": {"message": "out of blocks"}}\n\n'])
    assert not sample.ok and reply == ""
    assert sample.error.startswith("error event:") and "out of blocks" in sample.error


def test_a_malformed_payload_is_a_bad_stream():
    sample, reply = stream_into_sample([content("a"), "data: {cut off\n\n"])
    assert not sample.ok and sample.error.startswith("bad stream:")


def test_a_stream_without_content_fails():
    sample, _ = stream_into_sample(["data: [DONE]\n\n"])
    assert not sample.ok and sample.error == "the stream carried no content" and sample.ttft_s is None
