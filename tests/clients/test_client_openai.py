"""The official ``openai`` SDK, sync and async, plain and streaming, on chat, completions and
responses, against a replica and the gateway. Greedy decoding, so every form gives the same text."""

from __future__ import annotations

import asyncio

import openai

from tests.support.replicas import API_KEY, MODEL

TOKENS = 8
EXACT = {"temperature": 0.0, "extra_body": {"ignore_eos": True}}
MESSAGES = [{"role": "user", "content": "Say hello."}]


def clients(endpoint):
    args = {"base_url": endpoint.v1, "api_key": API_KEY, "max_retries": 0, "timeout": 60}
    return openai.OpenAI(**args), openai.AsyncOpenAI(**args)


def test_chat_sync_async_and_streaming_agree(endpoint):
    sync, aio = clients(endpoint)
    request = {"model": MODEL, "messages": MESSAGES, "max_tokens": TOKENS, **EXACT}
    full = sync.chat.completions.create(**request)
    assert full.choices[0].finish_reason == "length" and full.usage.completion_tokens == TOKENS
    text = full.choices[0].message.content

    chunks = list(
        sync.chat.completions.create(**request, stream=True, stream_options={"include_usage": True})
    )
    assert chunks[0].choices[0].delta.role == "assistant" and chunks[0].choices[0].delta.content
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == text
    assert chunks[-1].usage.completion_tokens == TOKENS

    with sync.chat.completions.stream(**request) as stream:  # the SDK's event helper
        assert "".join(e.delta for e in stream if e.type == "content.delta") == text

    async def both():
        whole = await aio.chat.completions.create(**request)
        stream = await aio.chat.completions.create(**request, stream=True)
        parts = [c.choices[0].delta.content or "" async for c in stream if c.choices]
        return whole.choices[0].message.content, "".join(parts)

    assert asyncio.run(both()) == (text, text)


def test_completions_sync_async_and_streaming_agree(endpoint):
    sync, aio = clients(endpoint)
    request = {"model": MODEL, "prompt": "def main():", "max_tokens": TOKENS, **EXACT}
    full = sync.completions.create(**request)
    assert full.choices[0].finish_reason == "length" and full.usage.completion_tokens == TOKENS
    text = full.choices[0].text
    stream = sync.completions.create(**request, stream=True)
    assert "".join(c.choices[0].text for c in stream if c.choices) == text

    async def both():
        whole = await aio.completions.create(**request)
        stream = await aio.completions.create(**request, stream=True)
        return whole.choices[0].text, "".join([c.choices[0].text async for c in stream if c.choices])

    assert asyncio.run(both()) == (text, text)


def test_responses_sync_async_and_streaming_agree(endpoint):
    sync, aio = clients(endpoint)
    request = {"model": MODEL, "input": "Hi there", "max_output_tokens": TOKENS, "temperature": 0.0}
    full = sync.responses.create(**request)
    assert full.status in ("completed", "incomplete") and 0 < full.usage.output_tokens <= TOKENS
    text = full.output_text

    # The SDK's helper; its get_final_response() wants response.completed, and a reply cut at
    # max_output_tokens ends with response.incomplete, as OpenAI's own does.
    with sync.responses.stream(**request) as stream:
        events = list(stream)
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == text
    assert events[-1].type == f"response.{full.status}"
    assert events[-1].response.usage.output_tokens == full.usage.output_tokens

    async def both():
        whole = await aio.responses.create(**request)
        events = [e async for e in await aio.responses.create(**request, stream=True)]
        return whole.output_text, events

    whole, events = asyncio.run(both())
    assert whole == text
    assert events[0].type == "response.created" and events[-1].response.output_text == text
