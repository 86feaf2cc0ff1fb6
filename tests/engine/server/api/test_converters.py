"""Each API's request converts into the one Conversation; unsupported input is refused by name."""

from __future__ import annotations

import json

import pytest

from engine.server.api import anthropic_messages, openai_chat, responses
from engine.server.api.response_store import ResponseStore, StoredResponse
from engine.server.api.sampling import build_params, resolve_max_tokens
from engine.server.conversation import Message
from engine.server.errors import APIError
from engine.server.protocol.anthropic import MessagesRequest
from engine.server.protocol.openai import ChatCompletionRequest
from engine.server.protocol.responses import ResponsesRequest
from engine.server.tool_parsers import ToolCall

WEATHER = {"type": "object", "properties": {"city": {"type": "string"}}}


def chat(**fields):
    return ChatCompletionRequest.model_validate({"model": "m", **fields})


def test_openai_chat_roles_tool_calls_and_tool_results():
    req = chat(
        messages=[
            {"role": "developer", "content": "be brief"},
            {
                "role": "user",
                "content": [{"type": "text", "text": "weather in "}, {"type": "text", "text": "Oslo?"}],
            },
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "w", "arguments": '{"city": "Oslo"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "-3C"},
        ],
        tools=[{"type": "function", "function": {"name": "w", "parameters": WEATHER}}],
    )
    conversation, use_tools = openai_chat.to_conversation(req)
    assert use_tools
    rendered = conversation.template_messages()
    assert [m["role"] for m in rendered] == ["system", "user", "assistant", "tool"]
    assert rendered[1]["content"] == "weather in Oslo?"
    # Templates get arguments as a dict, the way HF chat templates index them.
    assert rendered[2]["tool_calls"][0]["function"] == {"name": "w", "arguments": {"city": "Oslo"}}
    assert rendered[3] == {"role": "tool", "content": "-3C", "tool_call_id": "call_1"}
    assert conversation.template_tools()[0]["function"]["parameters"] == WEATHER


def test_openai_tool_choice_none_renders_no_tools():
    req = chat(
        messages=[{"role": "user", "content": "hi"}],
        tools=[{"type": "function", "function": {"name": "w"}}],
        tool_choice="none",
    )
    conversation, use_tools = openai_chat.to_conversation(req)
    assert not use_tools and conversation.template_tools() is None


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]},
         "messages[0].content[0].type"),
        ({"messages": [{"role": "user", "content": "hi"}], "tool_choice": "required"}, "tool_choice"),
        ({"messages": [{"role": "user", "content": "hi"}], "audio": {"voice": "x"}}, "audio"),
    ],
)  # fmt: skip
def test_openai_unsupported_input_is_refused_by_name(fields, param):
    with pytest.raises(APIError) as info:
        openai_chat.to_conversation(chat(**fields))
    assert info.value.status == 400 and info.value.param == param


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"logit_bias": {"1": 5}}, "logit_bias"),
    ],
)
def test_openai_unimplemented_sampling_is_refused(fields, param):
    with pytest.raises(APIError) as info:
        openai_chat.sampling(chat(messages=[{"role": "user", "content": "x"}], **fields), 5, 100)
    assert info.value.param == param


def test_max_completion_tokens_wins_and_seeds_advance_per_choice():
    req = chat(
        messages=[{"role": "user", "content": "x"}], max_tokens=5, max_completion_tokens=7, n=3, seed=40
    )
    params = openai_chat.sampling(req, prompt_len=10, max_model_len=100)
    assert [p.max_tokens for p in params] == [7, 7, 7]
    assert [p.seed for p in params] == [40, 41, 42]


def test_context_length_rules():
    assert resolve_max_tokens(100, 10, None, "messages") == 90
    with pytest.raises(APIError) as info:
        resolve_max_tokens(100, 100, None, "messages")
    assert info.value.param == "messages" and "maximum context length is 100" in info.value.message
    with pytest.raises(APIError) as info:
        resolve_max_tokens(100, 10, 91, "messages")
    assert info.value.param == "max_tokens"


def test_engine_validation_errors_become_400s():
    with pytest.raises(APIError) as info:
        build_params(1, None, max_tokens=3, min_tokens=9)
    assert info.value.status == 400 and "min_tokens" in info.value.message


def test_anthropic_system_tool_use_and_tool_result():
    req = MessagesRequest.model_validate(
        {
            "model": "m",
            "max_tokens": 10,
            "system": [{"type": "text", "text": "sys"}],
            "tools": [{"name": "w", "description": "weather", "input_schema": WEATHER}],
            "messages": [
                {"role": "user", "content": "weather?"},
                {
                    "role": "assistant",
                    "content": [
                        {"type": "text", "text": "Let me check."},
                        {"type": "tool_use", "id": "toolu_1", "name": "w", "input": {"city": "Oslo"}},
                    ],
                },
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "tool_result",
                            "tool_use_id": "toolu_1",
                            "content": [{"type": "text", "text": "-3C"}],
                        },
                        {"type": "text", "text": "thanks"},
                    ],
                },
            ],
        }
    )
    conversation, use_tools = anthropic_messages.to_conversation(req)
    assert use_tools
    roles = [(m.role, m.content) for m in conversation.messages]
    assert roles == [
        ("system", "sys"),
        ("user", "weather?"),
        ("assistant", "Let me check."),
        ("tool", "-3C"),
        ("user", "thanks"),
    ]
    call = conversation.messages[2].tool_calls[0]
    assert (call.id, call.name, json.loads(call.arguments)) == ("toolu_1", "w", {"city": "Oslo"})
    assert conversation.messages[3].tool_call_id == "toolu_1" and conversation.messages[3].name == "w"


def test_anthropic_image_block_is_refused():
    req = MessagesRequest.model_validate(
        {
            "model": "m",
            "max_tokens": 5,
            "messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}],
        }
    )
    with pytest.raises(APIError) as info:
        anthropic_messages.to_conversation(req)
    assert info.value.param == "messages[0].content[0].type"


@pytest.mark.parametrize(
    ("finish", "stop", "tools", "expected"),
    [
        ("stop", None, False, ("end_turn", None)),
        ("stop", "END", False, ("stop_sequence", "END")),
        ("length", None, False, ("max_tokens", None)),
        ("stop", None, True, ("tool_use", None)),
    ],
)
def test_anthropic_stop_reasons(finish, stop, tools, expected):
    assert anthropic_messages.stop_reason(finish, stop, tools) == expected


def test_responses_previous_response_id_continues_stored_history_without_old_instructions():
    store = ResponseStore(capacity=2)
    history = [Message(role="user", content="first"), Message(role="assistant", content="reply")]
    store.put("resp_1", StoredResponse(body={}, history=history))
    req = ResponsesRequest.model_validate(
        {
            "model": "m",
            "instructions": "new rules",
            "previous_response_id": "resp_1",
            "input": [
                {"type": "function_call", "call_id": "call_9", "name": "w", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "call_9", "output": "sunny"},
                {"role": "user", "content": [{"type": "input_text", "text": "and now?"}]},
            ],
        }
    )
    conversation, new_history, _ = responses.to_conversation(req, store)
    assert [m.role for m in conversation.messages] == [
        "system",
        "user",
        "assistant",
        "assistant",
        "tool",
        "user",
    ]
    assert conversation.messages[0].content == "new rules"
    assert [m.role for m in new_history] == ["user", "assistant", "assistant", "tool", "user"]
    assert new_history[2].tool_calls == [ToolCall("call_9", "w", "{}")]


def test_responses_unknown_previous_id_is_404_and_store_is_bounded():
    store = ResponseStore(capacity=2)
    for i in range(3):
        store.put(f"r{i}", StoredResponse(body={}, history=[]))
    assert store.get("r0") is None and len(store) == 2
    req = ResponsesRequest.model_validate({"model": "m", "input": "x", "previous_response_id": "r0"})
    with pytest.raises(APIError) as info:
        responses.to_conversation(req, store)
    assert info.value.status == 404 and info.value.param == "previous_response_id"


def test_responses_unknown_reasoning_keys_and_bad_formats_are_refused_by_name():
    req = ResponsesRequest.model_validate({"model": "m", "input": "x", "reasoning": {"frobnicate": 1}})
    with pytest.raises(APIError) as info:
        responses.to_conversation(req, ResponseStore())
    assert info.value.param == "reasoning.frobnicate"
    for fmt, param in (
        ({"type": "xml"}, "text.format"),
        ({"type": "json_schema", "name": "x", "schema": {"type": "frob"}}, "text.format.schema"),
    ):
        req = ResponsesRequest.model_validate({"model": "m", "input": "x", "text": {"format": fmt}})
        with pytest.raises(APIError) as info:
            responses.output_spec(req)
        assert info.value.status == 400 and info.value.param == param
