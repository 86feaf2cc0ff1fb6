"""The response builders of all three APIs, fed recorded tool-call replies, read by the official SDKs.

A random tiny model never emits tool calls, so these tests drive the real builders with events
made from recorded model text (cut into 1-character chunks and run through the real parser), and
hand the bytes they produce to the official ``openai`` / ``anthropic`` clients through an httpx
transport. The SDKs' own stream accumulators must then see well-formed tool calls.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import anthropic
import httpx
import httpx2  # the anthropic SDK's HTTP client package
import openai
import pytest

from engine.server.api import anthropic_messages, openai_chat, responses
from engine.server.api.common import TokenText
from engine.server.api.response_store import ResponseStore
from engine.server.generation import ChoiceEvent, collect
from engine.server.protocol.openai import ChatCompletionRequest
from engine.server.protocol.responses import ResponsesRequest
from engine.server.tool_parsers import PARSERS

HERMES_REPLY = (
    'Checking.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "東京", "unit": "celsius"}}\n</tool_call>\n'
    '<tool_call>\n{"name": "get_time", "arguments": {"tz": "Asia/Tokyo"}}\n</tool_call>'
)
EXPECTED_CALLS = [("get_weather", {"city": "東京", "unit": "celsius"}), ("get_time", {"tz": "Asia/Tokyo"})]
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]


def recorded_events(text: str, family: str = "hermes") -> list[ChoiceEvent]:
    parser = PARSERS[family]()
    events = []
    for i, char in enumerate(text):
        delta = parser.feed(char)
        last = i == len(text) - 1
        if last:
            delta.extend(parser.finish())
        events.append(
            ChoiceEvent(
                index=0,
                content=delta.content,
                tool_calls=delta.tool_calls,
                token_ids=[i],
                finished=last,
                finish_reason="stop" if last else None,
                prompt_tokens=12,
                cached_tokens=0,
            )
        )
    return events


async def _aiter(items: list[ChoiceEvent]) -> AsyncIterator[ChoiceEvent]:
    for item in items:
        yield item


def _drain(stream: AsyncIterator[str]) -> bytes:
    async def run() -> str:
        return "".join([chunk async for chunk in stream])

    return asyncio.run(run()).encode()


def _client_transport(body: bytes, content_type: str, lib=httpx):
    def handler(request):
        return lib.Response(200, headers={"content-type": content_type}, content=body)

    return lib.Client(transport=lib.MockTransport(handler))


class _NoTokenizer:
    def decode(self, ids):  # logprobs are off in these tests
        raise AssertionError("not used")


def _chat_request(stream: bool) -> ChatCompletionRequest:
    return ChatCompletionRequest.model_validate(
        {"model": "m", "messages": [{"role": "user", "content": "hi"}], "tools": TOOLS, "stream": stream}
    )


def test_openai_chat_stream_delivers_well_formed_tool_calls():
    req = _chat_request(stream=True)
    body = _drain(
        openai_chat.stream_response(
            req, "m", _aiter(recorded_events(HERMES_REPLY)), TokenText(_NoTokenizer())
        )
    )
    client = openai.OpenAI(
        base_url="http://replica/v1", api_key="k", http_client=_client_transport(body, "text/event-stream")
    )
    with client.chat.completions.stream(model="m", messages=[{"role": "user", "content": "hi"}]) as stream:
        final = stream.get_final_completion()
    choice = final.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content.strip() == "Checking."
    calls = [(c.function.name, json.loads(c.function.arguments)) for c in choice.message.tool_calls]
    assert calls == EXPECTED_CALLS
    assert all(c.id.startswith("call_") and c.type == "function" for c in choice.message.tool_calls)


def test_openai_chat_non_streaming_response_has_tool_calls():
    req = _chat_request(stream=False)
    choices, usage = asyncio.run(collect(_aiter(recorded_events(HERMES_REPLY)), 1))
    body = openai_chat.build_response(req, "m", choices, usage, TokenText(_NoTokenizer()))
    client = openai.OpenAI(
        base_url="http://replica/v1",
        api_key="k",
        http_client=_client_transport(json.dumps(body).encode(), "application/json"),
    )
    completion = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    message = completion.choices[0].message
    assert [(c.function.name, json.loads(c.function.arguments)) for c in message.tool_calls] == EXPECTED_CALLS
    assert completion.usage.completion_tokens == len(HERMES_REPLY)


def test_anthropic_stream_delivers_tool_use_blocks():
    body = _drain(anthropic_messages.stream_response("m", _aiter(recorded_events(HERMES_REPLY))))
    client = anthropic.Anthropic(
        base_url="http://replica",
        api_key="k",
        http_client=_client_transport(body, "text/event-stream", httpx2),
    )
    with client.messages.stream(
        model="m", max_tokens=64, messages=[{"role": "user", "content": "hi"}]
    ) as stream:
        message = stream.get_final_message()
    assert message.stop_reason == "tool_use"
    assert message.content[0].type == "text" and message.content[0].text.strip() == "Checking."
    uses = [(b.name, b.input) for b in message.content if b.type == "tool_use"]
    assert uses == EXPECTED_CALLS
    assert all(b.id.startswith("toolu_") for b in message.content if b.type == "tool_use")


def test_anthropic_non_streaming_message_has_tool_use_blocks():
    choices, usage = asyncio.run(collect(_aiter(recorded_events(HERMES_REPLY)), 1))
    body = anthropic_messages.build_response("m", choices[0], usage)
    client = anthropic.Anthropic(
        base_url="http://replica",
        api_key="k",
        http_client=_client_transport(json.dumps(body).encode(), "application/json", httpx2),
    )
    message = client.messages.create(model="m", max_tokens=64, messages=[{"role": "user", "content": "hi"}])
    assert message.stop_reason == "tool_use"
    assert [(b.name, b.input) for b in message.content if b.type == "tool_use"] == EXPECTED_CALLS


@pytest.mark.parametrize("family", ["llama3", "deepseek"])
def test_other_families_reach_the_openai_sdk(family):
    text = {
        "llama3": '{"name": "get_weather", "parameters": {"city": "東京", "unit": "celsius"}}; '
        '{"name": "get_time", "parameters": {"tz": "Asia/Tokyo"}}',
        "deepseek": "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>"
        '{"city": "東京", "unit": "celsius"}<｜tool▁call▁end｜><｜tool▁call▁begin｜>get_time<｜tool▁sep｜>'
        '{"tz": "Asia/Tokyo"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>',
    }[family]
    req = _chat_request(stream=True)
    body = _drain(
        openai_chat.stream_response(
            req, "m", _aiter(recorded_events(text, family)), TokenText(_NoTokenizer())
        )
    )
    client = openai.OpenAI(
        base_url="http://replica/v1", api_key="k", http_client=_client_transport(body, "text/event-stream")
    )
    with client.chat.completions.stream(model="m", messages=[{"role": "user", "content": "hi"}]) as stream:
        final = stream.get_final_completion()
    calls = [(c.function.name, json.loads(c.function.arguments)) for c in final.choices[0].message.tool_calls]
    assert calls == EXPECTED_CALLS


def test_responses_stream_delivers_function_calls_and_stores_them():
    req = ResponsesRequest.model_validate({"model": "m", "input": "hi", "stream": True})
    store = ResponseStore(capacity=4)
    builder = responses.ResponseBuilder(req, "m")
    body = _drain(builder.stream(_aiter(recorded_events(HERMES_REPLY)), store, []))
    client = openai.OpenAI(
        base_url="http://replica/v1", api_key="k", http_client=_client_transport(body, "text/event-stream")
    )
    with client.responses.stream(model="m", input="hi") as stream:
        final = stream.get_final_response()
    calls = [(item.name, json.loads(item.arguments)) for item in final.output if item.type == "function_call"]
    assert calls == EXPECTED_CALLS
    assert final.output_text.strip() == "Checking."
    stored = store.get(final.id)
    assert stored is not None and [c.name for c in stored.history[-1].tool_calls] == [
        "get_weather",
        "get_time",
    ]
