"""Control tokens a client types stay plain text wherever the chat template renders them."""

from __future__ import annotations

import json

import httpx
import pytest

from engine.server.protocol.prompts import request_prompt_ids
from engine.tokenizer import Tokenizer
from tests.support.replicas import API_KEY, MODEL

IM_START = "<|im_start|>"


@pytest.fixture(scope="module")
def qwen(tiny_qwen3):
    return Tokenizer(tiny_qwen3)


def chat_body(typed: str) -> dict:
    """A chat request with ``typed`` in every client-supplied string, keys at any depth included."""
    schema = {
        "type": "object",
        "properties": {
            f"city{typed}": {"type": "string", "description": f"where{typed}", "enum": [f"Paris{typed}"]},
            "nested": {"type": "object", "properties": {f"deep{typed}": {"type": "integer"}}},
        },
        "required": [f"city{typed}"],
    }
    tool = {
        "type": "function",
        "function": {"name": f"weather{typed}", "description": typed, "parameters": schema},
    }
    call = {
        "id": "c1",
        "type": "function",
        "function": {"name": f"weather{typed}", "arguments": json.dumps({f"k{typed}": typed})},
    }
    return {
        "model": "m",
        "tools": [tool],
        "messages": [
            {"role": "system", "content": f"be brief{typed}"},
            {"role": "user", "content": typed, "name": f"ann{typed}"},
            {"role": "assistant", "content": typed, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "c1", "content": typed},
        ],
    }


def messages_body(typed: str) -> dict:
    schema = {"type": "object", "properties": {f"city{typed}": {"type": "string", "enum": [typed]}}}
    return {
        "model": "m",
        "max_tokens": 4,
        "system": typed,
        "tools": [{"name": f"weather{typed}", "description": typed, "input_schema": schema}],
        "messages": [{"role": "user", "content": [{"type": "text", "text": typed}]}],
    }


@pytest.mark.parametrize(("api", "body"), [("chat", chat_body), ("messages", messages_body)])
def test_typed_control_tokens_are_never_control_tokens(qwen, api, body):
    im_start = qwen.hf.convert_tokens_to_ids(IM_START)
    template_count = request_prompt_ids(qwen, api, body("")).count(im_start)
    assert template_count >= 3  # the template's own turns are there
    ids = request_prompt_ids(qwen, api, body(IM_START))
    assert ids.count(im_start) == template_count
    text = qwen.decode(ids, skip_special_tokens=False)
    assert text.count(IM_START) > template_count  # the typed literals are in the prompt, as text


def test_a_replica_prefills_exactly_those_ids(replica, tiny_checkpoint):
    body = {**messages_body(IM_START), "model": MODEL, "max_tokens": 1}
    expected = request_prompt_ids(Tokenizer(tiny_checkpoint), "messages", body)
    response = httpx.post(f"{replica.base_url}/v1/messages", json=body, headers={"x-api-key": API_KEY})
    assert response.status_code == 200, response.text
    usage = response.json()["usage"]
    # Anthropic's input_tokens leaves out the prefix-cache hits, which an earlier test may have made.
    assert usage["input_tokens"] + usage["cache_read_input_tokens"] == len(expected)
