"""The official ``anthropic`` SDK, sync and async, plain and streaming (``messages.create`` with
``stream=True`` and the ``messages.stream`` helper), against a replica and the gateway."""

from __future__ import annotations

import asyncio

import anthropic

from tests.support.replicas import API_KEY, MODEL

TOKENS = 8
GREEDY = {"extra_body": {"temperature": 0.0}}  # this SDK version has no temperature argument
MESSAGES = [{"role": "user", "content": "Name a colour."}]


def deltas(events) -> str:
    return "".join(e.delta.text for e in events if e.type == "content_block_delta")


def test_messages_sync_async_and_streaming_agree(endpoint):
    args = {"base_url": endpoint.base_url, "api_key": API_KEY, "max_retries": 0, "timeout": 60}
    sync, aio = anthropic.Anthropic(**args), anthropic.AsyncAnthropic(**args)
    request = {"model": MODEL, "max_tokens": TOKENS, "system": "Be terse.", "messages": MESSAGES, **GREEDY}
    message = sync.messages.create(**request)
    assert message.stop_reason in ("end_turn", "max_tokens") and 0 < message.usage.output_tokens <= TOKENS
    text = "".join(b.text for b in message.content if b.type == "text")

    with sync.messages.stream(**request) as stream:
        assert "".join(stream.text_stream) == text
        final = stream.get_final_message()
    assert (
        final.stop_reason == message.stop_reason and final.usage.output_tokens == message.usage.output_tokens
    )

    events = list(sync.messages.create(**request, stream=True))
    kinds = [e.type for e in events]
    assert kinds[:2] == ["message_start", "content_block_start"]
    assert kinds[-2:] == ["message_delta", "message_stop"]
    assert deltas(events) == text

    async def three():
        whole = await aio.messages.create(**request)
        async with aio.messages.stream(**request) as stream:
            streamed = "".join([t async for t in stream.text_stream])
        raw = [e async for e in await aio.messages.create(**request, stream=True)]
        return whole.content[0].text, streamed, deltas(raw)

    assert asyncio.run(three()) == (text, text, text)
