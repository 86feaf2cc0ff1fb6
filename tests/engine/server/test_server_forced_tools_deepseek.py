"""Forced tool calls in DeepSeek's tool-call format through a real ``chassis serve``, received by the
official openai and anthropic SDKs in all three APIs.

The checkpoint is ``engine.testing.scripted_model``'s DeepSeek variant: its tokenizer has DeepSeek's
tool-call markers as tokens and its template renders calls in the V3.1 layout, so the server picks
the deepseek parser and forces calls with that layout's grammar. Greedy decoding writes
get_weather(city="Paris"); forcing get_time makes the grammar, not the script, write the call.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import jsonschema
import pytest

from engine.testing.scripted_model import GET_WEATHER_PARAMETERS, make_scripted_deepseek_tool_call_model
from tests.support.replicas import API_KEY, MODEL, Replica, start_replica, stop_replica

TIME = {"type": "object", "properties": {"zone": {"enum": ["UTC", "Europe/Oslo"]}}, "required": ["zone"],
        "additionalProperties": False}  # fmt: skip
TOOLS = {"get_weather": GET_WEATHER_PARAMETERS, "get_time": TIME}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]
MAX_TOKENS = 128


@pytest.fixture(scope="module")
def deepseek(tmp_path_factory) -> Iterator[Replica]:
    checkpoint = make_scripted_deepseek_tool_call_model(tmp_path_factory.mktemp("scripted") / "deepseek")
    running = start_replica(checkpoint, tmp_path_factory.mktemp("deepseek-logs"), "--num-gpu-blocks", "64")
    yield running
    stop_replica(running)


def valid(name: str, arguments: str, wanted: str | None) -> None:
    assert name in TOOLS and (wanted is None or name == wanted), name
    jsonschema.validate(json.loads(arguments), TOOLS[name])


def test_forced_calls_in_all_three_apis(deepseek):
    import anthropic
    import openai

    client = openai.OpenAI(base_url=f"{deepseek.base_url}/v1", api_key=API_KEY, max_retries=0, timeout=120)
    claude = anthropic.Anthropic(base_url=deepseek.base_url, api_key=API_KEY, max_retries=0, timeout=120)
    chat_tools = [{"type": "function", "function": {"name": n, "parameters": s}} for n, s in TOOLS.items()]
    for choice, wanted in (
        ("required", None),
        ({"type": "function", "function": {"name": "get_time"}}, "get_time"),
    ):
        for parallel in (True, False):
            result = client.chat.completions.create(
                model=MODEL, messages=ASK, tools=chat_tools, tool_choice=choice, parallel_tool_calls=parallel,
                max_tokens=MAX_TOKENS, temperature=0.0,
            )  # fmt: skip
            choice_out = result.choices[0]
            assert choice_out.finish_reason == "tool_calls", choice_out
            [call] = choice_out.message.tool_calls
            valid(call.function.name, call.function.arguments, wanted)

    stream = client.chat.completions.create(
        model=MODEL, messages=ASK, tools=chat_tools, tool_choice="required", max_tokens=MAX_TOKENS,
        temperature=0.0, stream=True,
    )  # fmt: skip
    deltas = [c.choices[0].delta for c in stream if c.choices]
    [streamed] = [d for delta in deltas for d in delta.tool_calls or []]
    valid(streamed.function.name, streamed.function.arguments, None)

    anthropic_tools = [{"name": n, "input_schema": s} for n, s in TOOLS.items()]
    for choice, wanted in (({"type": "any"}, None), ({"type": "tool", "name": "get_time"}, "get_time")):
        message = claude.messages.create(
            model=MODEL, max_tokens=MAX_TOKENS, messages=ASK, tools=anthropic_tools, tool_choice=choice,
            extra_body={"temperature": 0.0},
        )  # fmt: skip
        assert message.stop_reason == "tool_use", message
        [block] = [b for b in message.content if b.type == "tool_use"]
        valid(block.name, json.dumps(block.input), wanted)

    responses_tools = [{"type": "function", "name": n, "parameters": s} for n, s in TOOLS.items()]
    for choice, wanted in (("required", None), ({"type": "function", "name": "get_time"}, "get_time")):
        response = client.responses.create(
            model=MODEL, input=ASK, tools=responses_tools, tool_choice=choice, temperature=0.0,
            max_output_tokens=MAX_TOKENS,
        )  # fmt: skip
        [call] = [item for item in response.output if item.type == "function_call"]
        valid(call.name, call.arguments, wanted)


def test_unforced_call_is_parsed_from_the_deepseek_markers(deepseek):
    import openai

    client = openai.OpenAI(base_url=f"{deepseek.base_url}/v1", api_key=API_KEY, max_retries=0, timeout=120)
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": GET_WEATHER_PARAMETERS}}]
    result = client.chat.completions.create(
        model=MODEL, messages=ASK, tools=tools, max_tokens=32, temperature=0.0
    )
    [call] = result.choices[0].message.tool_calls
    assert call.function.name == "get_weather" and json.loads(call.function.arguments) == {"city": "Paris"}
