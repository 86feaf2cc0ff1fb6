"""Structured output through a real ``chassis serve`` of the real SmolLM2-135M-Instruct (CPU): 100
seeded JSON schemas of varied features (engine/testing/json_schemas.py: nesting, enums, bounded
arrays, patterns, anyOf, $ref), regexes and EBNF grammars, forced and strict tool calls, through all
three APIs and the official SDKs' structured-output helpers (OpenAI's ``parse`` with a pydantic
model and strict tools, Anthropic's ``messages.parse``). Every completed answer must validate; an
answer cut by max_tokens must say so ("length", "max_tokens", "incomplete").

The 100 schemas go round-robin to Chat Completions (greedy), Responses and Messages (sampled, seeded),
all at once, behind one short shared prompt (its prefix is cached, so the batch costs decode steps,
not 100 prefills): the check is the constraint, not what a 135M model makes of a schema in its prompt.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Literal

import httpx
import jsonschema
import pytest
from pydantic import BaseModel, Field

from engine.testing.smollm2 import smollm2_path
from tests.support.json_schemas import json_schemas
from tests.support.replicas import API_KEY, MODEL, Replica, start_replica, stop_replica

SCHEMAS = json_schemas(100, seed=19)
HEADERS = {"Authorization": f"Bearer {API_KEY}", "x-api-key": API_KEY}
MAX_TOKENS = 96
ASK_JSON = [{"role": "user", "content": "Reply with a short JSON value."}]


@pytest.fixture(scope="module")
def smollm2(tmp_path_factory) -> Iterator[Replica]:
    running = start_replica(
        smollm2_path(), tmp_path_factory.mktemp("smollm2-logs"), "--num-gpu-blocks", "1024",
        "--max-num-seqs", "128",
    )  # fmt: skip
    yield running
    stop_replica(running)


def post(replica: Replica, path: str, body: dict) -> dict:
    response = httpx.post(
        replica.base_url + path, json={"model": MODEL, **body}, headers=HEADERS, timeout=300
    )
    assert response.status_code == 200, response.text
    return response.json()


def in_parallel(fn, items) -> list:
    with ThreadPoolExecutor(max_workers=len(items)) as pool:
        return list(pool.map(fn, items))


def completed(text: str, finish_reason: str, schema: dict) -> bool:
    """Whether the answer completed; a completed answer must validate, a cut one says so."""
    if finish_reason in ("length", "max_tokens", "incomplete"):
        return False
    jsonschema.validate(json.loads(text), schema)
    return True


def via_chat(replica: Replica, schema: dict, seed: int) -> bool:
    fmt = {"type": "json_schema", "json_schema": {"name": "answer", "schema": schema, "strict": True}}
    body = post(replica, "/v1/chat/completions", {"messages": ASK_JSON, "response_format": fmt,
                                                  "max_tokens": MAX_TOKENS, "temperature": 0.0})  # fmt: skip
    choice = body["choices"][0]
    return completed(choice["message"]["content"], choice["finish_reason"], schema)


def via_responses(replica: Replica, schema: dict, seed: int) -> bool:
    fmt = {"type": "json_schema", "name": "answer", "schema": schema, "strict": True}
    body = post(replica, "/v1/responses", {"input": ASK_JSON, "text": {"format": fmt}, "seed": seed,
                                           "max_output_tokens": MAX_TOKENS, "temperature": 0.7})  # fmt: skip
    text = body["output"][0]["content"][0]["text"] if body["status"] == "completed" else ""
    return completed(text, body["status"], schema)


def via_messages(replica: Replica, schema: dict, seed: int) -> bool:
    fmt = {"type": "json_schema", "schema": schema}
    body = post(replica, "/v1/messages", {"messages": ASK_JSON, "output_config": {"format": fmt}, "seed": seed,
                                          "max_tokens": MAX_TOKENS, "temperature": 0.7})  # fmt: skip
    text = "".join(block["text"] for block in body["content"] if block["type"] == "text")
    return completed(text, body["stop_reason"], schema)


@pytest.mark.serial  # 100 generations on 2 cores: beside another test it ran past the 300 s timeout
def test_a_hundred_json_schemas_validate_through_all_three_apis(smollm2):
    apis = [via_chat, via_responses, via_messages]
    runs = [(apis[i % 3], schema, i) for i, schema in enumerate(SCHEMAS)]
    done = in_parallel(lambda run: run[0](smollm2, run[1], run[2]), runs)
    for api in apis:
        assert any(ok for (fn, _, _), ok in zip(runs, done, strict=True) if fn is api), api.__name__
    assert sum(done) >= len(done) * 3 // 4, done  # most finish: the check means something


def test_vllm_extras_regex_ebnf_and_choice(smollm2):
    cases = [
        ({"guided_regex": r"[A-Z][a-z]{2,8} [0-9]{2}"}, lambda t: re.fullmatch(r"[A-Z][a-z]{2,8} [0-9]{2}", t)),
        ({"structured_outputs": {"regex": r"(yes|no), because [a-z ]{1,20}\."}},
         lambda t: re.fullmatch(r"(yes|no), because [a-z ]{1,20}\.", t)),
        ({"guided_grammar": 'root ::= "(" num " + " num ")"\nnum ::= [1-9] [0-9]?'},
         lambda t: re.fullmatch(r"\([1-9][0-9]? \+ [1-9][0-9]?\)", t)),
        ({"structured_outputs": {"choice": ["Paris", "London", "Rome"]}}, lambda t: t in ("Paris", "London", "Rome")),
        ({"guided_json": SCHEMAS[0]}, lambda t: jsonschema.validate(json.loads(t), SCHEMAS[0]) is None),
    ]  # fmt: skip

    def run(case) -> tuple[str, str]:
        extra, _ = case
        prompt = "The capital of France, and why?"
        body = post(
            smollm2, "/v1/completions", {"prompt": prompt, "max_tokens": 40, "temperature": 0.0, **extra}
        )
        return body["choices"][0]["text"], body["choices"][0]["finish_reason"]

    for (extra, valid), (text, finish) in zip(cases, in_parallel(run, cases), strict=True):
        assert finish == "length" or valid(text), (extra, text)
    # The same through chat, streamed: the pieces join to a match.
    body = {"messages": [{"role": "user", "content": "A date?"}], "guided_regex": r"20[0-9]{2}-0[1-9]-[0-2][0-9]",
            "max_tokens": 20, "temperature": 0.0, "stream": True}  # fmt: skip
    response = httpx.post(smollm2.base_url + "/v1/chat/completions", json={"model": MODEL, **body}, headers=HEADERS,
                          timeout=300)  # fmt: skip
    chunks = [json.loads(line[6:]) for line in response.text.splitlines() if line.startswith("data: {")]
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert re.fullmatch(r"20[0-9]{2}-0[1-9]-[0-2][0-9]", text), text


class City(BaseModel):
    name: str = Field(max_length=20)
    country: str = Field(max_length=20)
    population_millions: int = Field(ge=0, le=50)


class Place(BaseModel):
    name: str
    kind: Literal["city", "village"]
    population_millions: int


def test_sdk_parse_helpers_and_strict_tools(smollm2):
    import anthropic
    import openai

    client = openai.OpenAI(base_url=f"{smollm2.base_url}/v1", api_key=API_KEY, max_retries=0, timeout=300)
    messages = [{"role": "user", "content": "Describe Paris as JSON."}]
    parsed = client.chat.completions.parse(
        model=MODEL, messages=messages, response_format=City, max_tokens=MAX_TOKENS, temperature=0.0
    )
    choice = parsed.choices[0]
    assert choice.finish_reason == "stop" and isinstance(choice.message.parsed, City)

    claude = anthropic.Anthropic(base_url=smollm2.base_url, api_key=API_KEY, max_retries=0, timeout=300)
    # Anthropic's SDK moves length and range bounds out of the schema it sends (into descriptions)
    # and checks them itself afterwards, so its model here has none: the server enforces what it gets.
    message = claude.messages.parse(
        model=MODEL, messages=messages, output_format=Place, max_tokens=MAX_TOKENS
    )
    assert message.stop_reason == "end_turn" and isinstance(message.parsed_output, Place), message

    tool = openai.pydantic_function_tool(City, name="record_city")
    assert tool["function"]["strict"] is True
    for tool_choice in ("required", {"type": "function", "function": {"name": "record_city"}}):
        result = client.chat.completions.parse(
            model=MODEL, messages=messages, tools=[tool], tool_choice=tool_choice, max_tokens=MAX_TOKENS,
            temperature=0.0, parallel_tool_calls=False,
        )  # fmt: skip
        choice = result.choices[0]
        assert choice.finish_reason == "tool_calls", choice
        [call] = choice.message.tool_calls
        assert call.function.name == "record_city"
        assert isinstance(call.function.parsed_arguments, City)


WEATHER = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 16},
           "unit": {"enum": ["celsius", "fahrenheit"]}}, "required": ["city", "unit"], "additionalProperties": False}  # fmt: skip
TIME = {"type": "object", "properties": {"zone": {"type": "string", "pattern": "^[A-Z][a-z]+/[A-Z][a-z]+$"}},
        "required": ["zone"], "additionalProperties": False}  # fmt: skip
TOOLS = {"get_weather": WEATHER, "get_time": TIME}


def test_forced_tool_calls_in_all_three_apis(smollm2):
    chat_tools = [{"type": "function", "function": {"name": n, "parameters": s}} for n, s in TOOLS.items()]
    ask_weather = [{"role": "user", "content": "What's the weather in Oslo?"}]

    def chat(choice) -> tuple[str, str]:
        body = post(smollm2, "/v1/chat/completions", {"messages": ask_weather, "tools": chat_tools,
                    "tool_choice": choice, "max_tokens": MAX_TOKENS, "temperature": 0.0})  # fmt: skip
        assert body["choices"][0]["finish_reason"] == "tool_calls", body
        [call] = body["choices"][0]["message"]["tool_calls"]
        return call["function"]["name"], call["function"]["arguments"]

    def messages(choice) -> tuple[str, str]:
        tools = [{"name": n, "input_schema": s} for n, s in TOOLS.items()]
        body = post(smollm2, "/v1/messages", {"messages": ask_weather, "tools": tools, "tool_choice": choice,
                                              "max_tokens": MAX_TOKENS, "temperature": 0.0})  # fmt: skip
        assert body["stop_reason"] == "tool_use", body
        [block] = [b for b in body["content"] if b["type"] == "tool_use"]
        return block["name"], json.dumps(block["input"])

    def responses(choice) -> tuple[str, str]:
        tools = [{"type": "function", "name": n, "parameters": s} for n, s in TOOLS.items()]
        body = post(smollm2, "/v1/responses", {"input": ask_weather, "tools": tools, "tool_choice": choice,
                                               "max_output_tokens": MAX_TOKENS, "temperature": 0.0})  # fmt: skip
        [call] = [item for item in body["output"] if item["type"] == "function_call"]
        return call["name"], call["arguments"]

    runs = [
        (chat, "required", None), (chat, {"type": "function", "function": {"name": "get_time"}}, "get_time"),
        (messages, {"type": "any"}, None), (messages, {"type": "tool", "name": "get_time"}, "get_time"),
        (responses, "required", None), (responses, {"type": "function", "name": "get_weather"}, "get_weather"),
    ]  # fmt: skip
    for (_, _, wanted), (name, arguments) in zip(runs, in_parallel(lambda r: r[0](r[1]), runs), strict=True):
        assert name in TOOLS and (wanted is None or name == wanted)
        jsonschema.validate(json.loads(arguments), TOOLS[name])


def test_bad_constraints_are_a_400_naming_the_field_with_the_compilers_message(smollm2):
    cases = [
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "response_format":
         {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "frob"}}}},
         "response_format.json_schema.schema", "Unsupported type"),
        ("/v1/completions", {"prompt": "x", "guided_regex": "(ab"}, "guided_regex", "parenthesis"),
        ("/v1/completions", {"prompt": "x", "structured_outputs": {"grammar": "root ::= foo"}},
         "structured_outputs.grammar", 'Rule "foo" is not defined'),
        ("/v1/responses", {"input": "x", "text": {"format": {"type": "json_schema", "name": "x", "schema":
         {"$ref": "#/$defs/nope"}}}}, "text.format.schema", "$defs"),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "tool_choice":
         {"type": "function", "function": {"name": "nope"}}, "tools": [{"type": "function", "function":
         {"name": "a"}}]}, "tool_choice", "nope"),
    ]  # fmt: skip
    for path, body, param, message in cases:
        response = httpx.post(
            smollm2.base_url + path, json={"model": MODEL, **body}, headers=HEADERS, timeout=60
        )
        assert response.status_code == 400, response.text
        error = response.json()["error"]
        assert error["param"] == param and message in error["message"], error
