"""Reasoning output through a real ``chassis serve`` process, on scripted thinking checkpoints
(``engine.testing.scripted_thinking``) of both template styles: Qwen3 (the reply opens ``<think>``,
``enable_thinking`` switches it) and DeepSeek-R1 (the prompt opens it, no switch)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest

from engine.testing.scripted_thinking import (
    ANSWER,
    QWEN3_PIECES,
    R1_PIECES,
    REASONING,
    make_qwen3_thinking_model,
    make_r1_thinking_model,
)
from tests.support.replicas import API_KEY, MODEL, Replica, start_replica, stop_replica

HI = [{"role": "user", "content": "hi"}]
CHAT = {"model": MODEL, "messages": HI, "temperature": 0.0, "max_tokens": 16}
HEADERS = {"Authorization": f"Bearer {API_KEY}", "x-api-key": API_KEY}


@pytest.fixture(scope="module", params=["qwen3", "r1"])
def thinking(request, tmp_path_factory) -> Iterator[tuple[str, Replica]]:
    make = make_qwen3_thinking_model if request.param == "qwen3" else make_r1_thinking_model
    checkpoint = make(tmp_path_factory.mktemp("thinking") / request.param)
    running = start_replica(checkpoint, tmp_path_factory.mktemp("thinking-logs"), "--num-gpu-blocks", "64")
    yield request.param, running
    stop_replica(running)


def post(replica: Replica, path: str, body: dict) -> httpx.Response:
    return httpx.post(replica.base_url + path, json=body, headers=HEADERS, timeout=60)


def sse_payloads(response: httpx.Response) -> list[dict]:
    lines = [line.removeprefix("data: ") for line in response.text.splitlines() if line.startswith("data: ")]
    return [json.loads(line) for line in lines if line != "[DONE]"]


def test_chat_separates_reasoning_whole_and_streamed(thinking):
    style, replica = thinking
    body = post(replica, "/v1/chat/completions", CHAT).json()
    message = body["choices"][0]["message"]
    assert message["reasoning_content"].strip() == REASONING
    assert message["content"] == ANSWER
    reasoning_tokens = body["usage"]["completion_tokens_details"]["reasoning_tokens"]
    assert 0 < reasoning_tokens < body["usage"]["completion_tokens"]
    # The script's reasoning pieces up to </think> (Qwen3's reply opens <think> itself).
    assert reasoning_tokens == (4 if style == "qwen3" else 3)

    streamed = post(replica, "/v1/chat/completions", {**CHAT, "stream": True})
    deltas = [p["choices"][0]["delta"] for p in sse_payloads(streamed) if p["choices"]]
    reasoning = "".join(d.get("reasoning_content") or "" for d in deltas)
    content = "".join(d.get("content") or "" for d in deltas)
    assert reasoning.strip() == REASONING and content == ANSWER
    assert not any(d.get("reasoning_content") and d.get("content") for d in deltas)


def test_messages_thinking_block_and_responses_reasoning_item(thinking):
    _, replica = thinking
    message = post(replica, "/v1/messages", {"model": MODEL, "max_tokens": 16, "messages": HI}).json()
    thinking_block, text_block = message["content"]
    assert thinking_block["type"] == "thinking" and thinking_block["thinking"].strip() == REASONING
    assert text_block == {"type": "text", "text": ANSWER}

    stream = post(replica, "/v1/messages", {"model": MODEL, "max_tokens": 16, "messages": HI, "stream": True})
    events = sse_payloads(stream)
    starts = [e["content_block"]["type"] for e in events if e["type"] == "content_block_start"]
    assert starts == ["thinking", "text"]
    deltas = [e["delta"] for e in events if e["type"] == "content_block_delta"]
    assert "".join(d.get("thinking", "") for d in deltas).strip() == REASONING
    assert "".join(d.get("text", "") for d in deltas) == ANSWER

    response = post(replica, "/v1/responses", {"model": MODEL, "input": "hi", "max_output_tokens": 16}).json()
    reasoning_item, message_item = response["output"]
    assert reasoning_item["type"] == "reasoning"
    assert reasoning_item["content"][0]["text"].strip() == REASONING
    assert message_item["content"][0]["text"] == ANSWER
    assert response["usage"]["output_tokens_details"]["reasoning_tokens"] > 0

    stream = post(
        replica, "/v1/responses", {"model": MODEL, "input": "hi", "max_output_tokens": 16, "stream": True}
    )
    kinds = [e["type"] for e in sse_payloads(stream)]
    assert kinds.index("response.reasoning_text.delta") < kinds.index("response.output_text.delta")


def test_thinking_switch_follows_the_template(thinking):
    style, replica = thinking
    on = post(replica, "/v1/chat/completions", {**CHAT, "reasoning_effort": "high"}).json()
    off = post(replica, "/v1/chat/completions", {**CHAT, "reasoning_effort": "none"})
    anthropic_off = post(
        replica,
        "/v1/messages",
        {"model": MODEL, "max_tokens": 16, "messages": HI, "thinking": {"type": "disabled"}},
    )
    if style == "r1":  # no switch in the template: it always thinks
        assert on["choices"][0]["message"]["reasoning_content"].strip() == REASONING
        for response, param in ((off, "reasoning_effort"), (anthropic_off, "thinking")):
            assert response.status_code == 400, response.text
            assert "no thinking switch" in response.text and param in response.text
        return
    # Qwen3: enable_thinking false closes an empty block in the prompt, and the script ends there.
    assert off.status_code == 200 and anthropic_off.status_code == 200
    off_body = off.json()
    assert off_body["usage"]["prompt_tokens"] > on["usage"]["prompt_tokens"]
    assert "reasoning_content" not in off_body["choices"][0]["message"]
    assert off_body["usage"]["completion_tokens_details"]["reasoning_tokens"] == 0
    assert on["choices"][0]["message"]["content"] == ANSWER


def test_grammar_applies_after_the_reasoning(thinking):
    style, replica = thinking
    body = {**CHAT, "max_tokens": 24, "response_format": {"type": "json_object"}}
    choice = post(replica, "/v1/chat/completions", body).json()["choices"][0]
    assert choice["message"]["reasoning_content"].strip() == REASONING  # unconstrained reasoning
    if choice["finish_reason"] == "stop":
        assert isinstance(json.loads(choice["message"]["content"]), dict)
    else:
        assert choice["finish_reason"] == "length"


def _reasoning_pieces(style: str) -> tuple[str, ...]:
    """The script's reasoning tokens inside the block (Qwen3's reply opens it with <think>)."""
    pieces = QWEN3_PIECES[1:] if style == "qwen3" else R1_PIECES
    return pieces[: pieces.index("</think>")]


@pytest.mark.parametrize("budget", [1, 2, 5])
def test_thinking_budget_ends_the_reasoning_and_the_answer_follows(thinking, budget):
    style, replica = thinking
    inside = _reasoning_pieces(style)  # two tokens: a budget of 5 lets the model end it itself
    wanted = "".join(inside[:budget])
    # usage counts the block's tokens and its </think> (and Qwen3's <think>)
    wanted_tokens = min(budget, len(inside)) + 1 + (style == "qwen3")
    thinking_on = {"type": "enabled", "budget_tokens": budget}
    body = {"model": MODEL, "max_tokens": 16, "messages": HI, "thinking": thinking_on}
    message = post(replica, "/v1/messages", body).json()
    thinking_block, text_block = message["content"]
    assert thinking_block["thinking"].strip() == wanted.strip()
    assert text_block == {"type": "text", "text": ANSWER}
    assert message["stop_reason"] == "end_turn"

    events = sse_payloads(post(replica, "/v1/messages", {**body, "stream": True}))
    deltas = [e["delta"] for e in events if e["type"] == "content_block_delta"]
    assert "".join(d.get("thinking", "") for d in deltas).strip() == wanted.strip()
    assert "".join(d.get("text", "") for d in deltas) == ANSWER

    # vLLM's thinking_token_budget on Chat Completions, whole and streamed
    chat = post(replica, "/v1/chat/completions", {**CHAT, "thinking_token_budget": budget}).json()
    assert chat["choices"][0]["message"]["reasoning_content"].strip() == wanted.strip()
    assert chat["choices"][0]["message"]["content"] == ANSWER
    assert chat["usage"]["completion_tokens_details"]["reasoning_tokens"] == wanted_tokens
    streamed = post(
        replica, "/v1/chat/completions", {**CHAT, "thinking_token_budget": budget, "stream": True}
    )
    chunks = [p["choices"][0]["delta"] for p in sse_payloads(streamed) if p["choices"]]
    assert "".join(d.get("reasoning_content") or "" for d in chunks).strip() == wanted.strip()
    assert "".join(d.get("content") or "" for d in chunks) == ANSWER


def test_thinking_budget_then_the_grammar_applies(thinking):
    style, replica = thinking
    body = {**CHAT, "max_tokens": 24, "response_format": {"type": "json_object"}, "thinking_token_budget": 1}
    choice = post(replica, "/v1/chat/completions", body).json()["choices"][0]
    assert choice["message"]["reasoning_content"].strip() == _reasoning_pieces(style)[0].strip()
    if choice["finish_reason"] == "stop":
        assert isinstance(json.loads(choice["message"]["content"]), dict)
    else:
        assert choice["finish_reason"] == "length"


def test_bad_thinking_budgets_are_a_400_naming_the_field(thinking):
    _, replica = thinking
    for budget in (0, "8", None, True, 16, 17):
        thinking_on = {"type": "enabled", "budget_tokens": budget}
        body = {"model": MODEL, "max_tokens": 16, "messages": HI, "thinking": thinking_on}
        response = post(replica, "/v1/messages", body)
        assert response.status_code == 400, (budget, response.text)
        assert response.json()["error"]["message"].startswith("thinking.budget_tokens"), response.text
    response = post(replica, "/v1/chat/completions", {**CHAT, "thinking_token_budget": 0})
    assert response.status_code == 400 and "thinking_token_budget" in response.text, response.text
