"""The official anthropic SDK against a real ``chassis serve`` process."""

from __future__ import annotations

from tests.support.replicas import MODEL

GREEDY = {"temperature": 0.0}  # this SDK version has no temperature argument; the API still takes it
MESSAGES = [{"role": "user", "content": [{"type": "text", "text": "Name a colour."}]}]


def test_messages_non_streaming_and_streaming_agree(anthropic_client):
    message = anthropic_client.messages.create(
        model=MODEL, max_tokens=12, system="You are terse.", messages=MESSAGES, extra_body=GREEDY
    )
    assert message.role == "assistant" and message.type == "message"
    assert message.stop_reason in ("end_turn", "max_tokens")
    assert message.usage.output_tokens > 0
    text = "".join(b.text for b in message.content if b.type == "text")

    with anthropic_client.messages.stream(
        model=MODEL, max_tokens=12, system="You are terse.", messages=MESSAGES, extra_body=GREEDY
    ) as stream:
        streamed = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert streamed == text
    assert final.stop_reason == message.stop_reason
    assert final.usage.output_tokens == message.usage.output_tokens


def test_stream_event_sequence(anthropic_client):
    with anthropic_client.messages.create(
        model=MODEL, max_tokens=6, messages=MESSAGES, extra_body=GREEDY, stream=True
    ) as events:
        kinds = [e.type for e in events]
    assert kinds[0] == "message_start" and kinds[-2:] == ["message_delta", "message_stop"]
    if "content_block_start" in kinds:
        assert kinds.index("content_block_start") < kinds.index("content_block_delta")
        assert kinds.index("content_block_stop") < kinds.index("message_delta")


def test_count_tokens_matches_usage(anthropic_client):
    counted = anthropic_client.messages.count_tokens(model=MODEL, system="You are terse.", messages=MESSAGES)
    message = anthropic_client.messages.create(
        model=MODEL, max_tokens=2, system="You are terse.", messages=MESSAGES, extra_body=GREEDY
    )
    usage = message.usage
    assert counted.input_tokens == usage.input_tokens + (usage.cache_read_input_tokens or 0)


def test_stop_sequences(anthropic_client):
    plain = anthropic_client.messages.create(model=MODEL, max_tokens=30, messages=MESSAGES, extra_body=GREEDY)
    text = plain.content[0].text if plain.content else ""
    if len(text) < 4:
        return
    stop = text[2:4]
    cut = anthropic_client.messages.create(
        model=MODEL, max_tokens=30, messages=MESSAGES, extra_body=GREEDY, stop_sequences=[stop]
    )
    assert cut.stop_reason == "stop_sequence" and cut.stop_sequence == stop
    assert "".join(b.text for b in cut.content) == text[: text.index(stop)]


def test_tool_use_history_and_tools(anthropic_client):
    tool = {
        "name": "get_weather",
        "description": "Weather",
        "input_schema": {"type": "object", "properties": {}},
    }
    messages = [
        {"role": "user", "content": "Weather in Oslo?"},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {}}],
        },
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "-3C"}]},
    ]
    with_history = anthropic_client.messages.count_tokens(model=MODEL, messages=messages, tools=[tool])
    without_tools = anthropic_client.messages.count_tokens(model=MODEL, messages=messages)
    assert with_history.input_tokens > without_tools.input_tokens
    reply = anthropic_client.messages.create(model=MODEL, max_tokens=4, messages=messages, tools=[tool])
    assert reply.stop_reason in ("end_turn", "max_tokens", "tool_use")
