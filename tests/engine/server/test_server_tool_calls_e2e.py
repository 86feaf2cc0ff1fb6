"""Tool calls through a real ``chassis serve`` process, received by the official openai and anthropic SDKs.

The checkpoint is ``engine.testing.scripted_model``: a real safetensors model whose greedy reply to any chat
prompt is a Hermes ``<tool_call>`` for get_weather(city="Paris"), written over several tokens so
the stream carries it in several chunks. Nothing between the SDK and the model is mocked.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from engine.testing.scripted_model import (
    GET_WEATHER_PARAMETERS,
    GET_WEATHER_TOOL,
    REPLY_TEXT,
    TOOL_ARGUMENTS,
    TOOL_NAME,
    make_scripted_tool_call_model,
)
from tests.support.replicas import API_KEY, MODEL, Replica, start_replica, stop_replica

ASK = "What is the weather in Paris?"
CHAT = {"model": MODEL, "messages": [{"role": "user", "content": ASK}], "temperature": 0.0, "max_tokens": 32}
ANTHROPIC_TOOL = {"name": TOOL_NAME, "description": "Current weather", "input_schema": GET_WEATHER_PARAMETERS}
MESSAGES = {
    "model": MODEL,
    "max_tokens": 32,
    "messages": [{"role": "user", "content": ASK}],
    "tools": [ANTHROPIC_TOOL],
    "extra_body": {"temperature": 0.0},
}
RESPONSES_TOOL = {"type": "function", "name": TOOL_NAME, "parameters": GET_WEATHER_PARAMETERS}


@pytest.fixture(scope="module")
def scripted_replica(tmp_path_factory) -> Iterator[Replica]:
    checkpoint = make_scripted_tool_call_model(tmp_path_factory.mktemp("scripted") / "scripted-qwen3")
    running = start_replica(checkpoint, tmp_path_factory.mktemp("scripted-logs"), "--num-gpu-blocks", "64")
    yield running
    stop_replica(running)


@pytest.fixture(scope="module")
def openai_tools(scripted_replica):
    import openai

    return openai.OpenAI(
        base_url=f"{scripted_replica.base_url}/v1", api_key=API_KEY, max_retries=0, timeout=60
    )


@pytest.fixture(scope="module")
def anthropic_tools(scripted_replica):
    import anthropic

    return anthropic.Anthropic(base_url=scripted_replica.base_url, api_key=API_KEY, max_retries=0, timeout=60)


def test_chat_non_streaming_returns_tool_call(openai_tools):
    result = openai_tools.chat.completions.create(**CHAT, tools=[GET_WEATHER_TOOL])
    choice = result.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert not choice.message.content
    [call] = choice.message.tool_calls
    assert call.type == "function" and call.id
    assert call.function.name == TOOL_NAME
    assert json.loads(call.function.arguments) == TOOL_ARGUMENTS
    assert result.usage.completion_tokens == 6  # five reply pieces and <|im_end|>


def test_chat_streaming_accumulates_to_the_same_tool_call(openai_tools):
    stream = openai_tools.chat.completions.create(**CHAT, tools=[GET_WEATHER_TOOL], stream=True)
    chunks = [c for c in stream if c.choices]
    content = "".join(c.choices[0].delta.content or "" for c in chunks)
    calls: dict[int, dict[str, str]] = {}
    for chunk in chunks:
        for delta in chunk.choices[0].delta.tool_calls or []:
            call = calls.setdefault(delta.index, {"id": "", "name": "", "arguments": ""})
            call["id"] += delta.id or ""
            call["name"] += (delta.function and delta.function.name) or ""
            call["arguments"] += (delta.function and delta.function.arguments) or ""
    assert content == ""
    assert list(calls) == [0]
    assert calls[0]["id"] and calls[0]["name"] == TOOL_NAME
    assert json.loads(calls[0]["arguments"]) == TOOL_ARGUMENTS
    assert chunks[-1].choices[0].finish_reason == "tool_calls"
    assert [c.choices[0].finish_reason for c in chunks[:-1]] == [None] * (len(chunks) - 1)


def test_chat_accepts_the_tool_result(openai_tools):
    first = openai_tools.chat.completions.create(**CHAT, tools=[GET_WEATHER_TOOL])
    call = first.choices[0].message.tool_calls[0]
    follow_up = openai_tools.chat.completions.with_raw_response.create(
        **{
            **CHAT,
            "messages": [
                *CHAT["messages"],
                first.choices[0].message.model_dump(exclude_none=True),
                {"role": "tool", "tool_call_id": call.id, "content": json.dumps({"temp_c": 18})},
            ],
        },
        tools=[GET_WEATHER_TOOL],
    )
    assert follow_up.http_response.status_code == 200
    # The tool exchange really reached the prompt: it is longer than the first one.
    assert follow_up.parse().usage.prompt_tokens > first.usage.prompt_tokens


def test_chat_without_tools_returns_the_raw_text(openai_tools):
    # tool_choice="none": no parsing, the model's words come back as they are.
    result = openai_tools.chat.completions.create(**CHAT, tools=[GET_WEATHER_TOOL], tool_choice="none")
    assert result.choices[0].message.content == REPLY_TEXT
    assert not result.choices[0].message.tool_calls
    assert result.choices[0].finish_reason == "stop"
    stream = openai_tools.chat.completions.create(
        **CHAT, tools=[GET_WEATHER_TOOL], tool_choice="none", stream=True
    )
    pieces = [c.choices[0].delta.content for c in stream if c.choices and c.choices[0].delta.content]
    # The model writes the call over several tokens; the parser, when on, puts them back together.
    assert len(pieces) >= 4 and "".join(pieces) == REPLY_TEXT


def test_responses_function_call_and_its_output(openai_tools):
    response = openai_tools.responses.create(
        model=MODEL, input=ASK, tools=[RESPONSES_TOOL], temperature=0.0, max_output_tokens=32
    )
    assert response.status == "completed"
    [item] = response.output
    assert item.type == "function_call" and item.name == TOOL_NAME and item.call_id
    assert json.loads(item.arguments) == TOOL_ARGUMENTS

    with openai_tools.responses.stream(
        model=MODEL, input=ASK, tools=[RESPONSES_TOOL], temperature=0.0, max_output_tokens=32
    ) as stream:
        streamed = stream.get_final_response()
    [streamed_item] = streamed.output
    assert streamed_item.type == "function_call" and streamed_item.name == TOOL_NAME
    assert json.loads(streamed_item.arguments) == TOOL_ARGUMENTS

    follow_up = openai_tools.responses.with_raw_response.create(
        model=MODEL,
        previous_response_id=response.id,
        input=[{"type": "function_call_output", "call_id": item.call_id, "output": '{"temp_c": 18}'}],
        tools=[RESPONSES_TOOL],
        temperature=0.0,
        max_output_tokens=32,
    )
    assert follow_up.http_response.status_code == 200
    assert follow_up.parse().usage.input_tokens > response.usage.input_tokens


def test_anthropic_non_streaming_returns_tool_use(anthropic_tools):
    message = anthropic_tools.messages.create(**MESSAGES)
    assert message.stop_reason == "tool_use"
    [block] = message.content
    assert block.type == "tool_use" and block.id.startswith("toolu_")
    assert block.name == TOOL_NAME and block.input == TOOL_ARGUMENTS


def test_anthropic_streaming_final_message_has_tool_use(anthropic_tools):
    with anthropic_tools.messages.stream(**MESSAGES) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_message()
    assert final.stop_reason == "tool_use"
    [block] = final.content
    assert block.type == "tool_use" and block.name == TOOL_NAME and block.input == TOOL_ARGUMENTS
    assert "input_json" in kinds and kinds[-1] == "message_stop"


def test_anthropic_accepts_the_tool_result(anthropic_tools):
    first = anthropic_tools.messages.create(**MESSAGES)
    tool_use = first.content[0]
    follow_up = anthropic_tools.messages.with_raw_response.create(
        **{
            **MESSAGES,
            "messages": [
                *MESSAGES["messages"],
                {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
                {
                    "role": "user",
                    "content": [
                        {"type": "tool_result", "tool_use_id": tool_use.id, "content": "18 °C, clear"}
                    ],
                },
            ],
        }
    )
    assert follow_up.http_response.status_code == 200
    # Input tokens read from the prefix cache are counted apart, as Anthropic does.
    before, after = first.usage, follow_up.parse().usage
    assert after.input_tokens + (after.cache_read_input_tokens or 0) > before.input_tokens + (
        before.cache_read_input_tokens or 0
    )
