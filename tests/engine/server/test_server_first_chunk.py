"""A live replica sends no stream bytes before prefill, on every streaming API.

The engine is held before its first step (step gate at 0): the request is in the engine, its
response headers have arrived, and no token exists. A reader thread waits for the first body bytes
and notes whether the gate was open by then; the test opens it only after seeing the request in the
engine. Bytes sent before prefill would reach the reader while the gate was still shut; bytes sent
after it hold the first token's text.
"""

from __future__ import annotations

import json
import threading

import httpx
import pytest

from tests.support.replicas import API_KEY, MODEL
from tests.support.waiting import wait_until

AUTH = {"Authorization": f"Bearer {API_KEY}"}
HELLO = [{"role": "user", "content": "Say something."}]
COMMON = {"model": MODEL, "stream": True, "temperature": 0.0}


def _in_engine(replica) -> bool:
    health = httpx.get(replica.base_url + "/health").json()
    return health.get("num_requests_running", 0) + health.get("num_requests_waiting", 0) >= 1


def first_bytes_after_prefill(replica, gate, path: str, body: dict) -> str:
    """The first body bytes of a stream; asserting they left the replica only after the test let
    the engine take its first step."""
    gate.hold_at(0)
    opened = threading.Event()
    seen: dict = {}
    with httpx.Client(timeout=60) as client:
        with client.stream("POST", replica.base_url + path, json=body, headers=AUTH) as response:
            assert response.status_code == 200

            def read_first() -> None:
                chunks = response.iter_raw()
                seen["bytes"] = next(chunks).decode()
                seen["gate_was_open"] = opened.is_set()
                seen["rest"] = b"".join(chunks).decode()

            reader = threading.Thread(target=read_first)
            reader.start()
            try:
                wait_until(lambda: _in_engine(replica), "the request to reach the engine")
            finally:
                opened.set()
                gate.open()
                reader.join(timeout=60)
    assert seen["gate_was_open"], f"sent before prefill: {seen['bytes']!r}"
    whole = seen["bytes"] + seen["rest"]
    assert (
        "[DONE]" in whole
        or "message_stop" in whole
        or "response.completed" in whole
        or ("response.incomplete" in whole)
    )  # the stream went on to its end
    return seen["bytes"]


def _payloads(raw: str) -> list[dict]:
    lines = raw.splitlines()
    return [json.loads(line[6:]) for line in lines if line.startswith("data: ") and line != "data: [DONE]"]


@pytest.mark.parametrize("usage", [False, True])
def test_chat_first_chunk_carries_role_and_text(replica, gate, usage):
    body = {**COMMON, "messages": HELLO, "max_tokens": 8}
    if usage:
        body["stream_options"] = {"include_usage": True, "continuous_usage_stats": True}
    first = _payloads(first_bytes_after_prefill(replica, gate, "/v1/chat/completions", body))[0]
    delta = first["choices"][0]["delta"]
    assert delta["role"] == "assistant" and delta["content"]
    if usage:
        assert first["usage"]["completion_tokens"] >= 1 and first["usage"]["prompt_tokens"] > 0


def test_completions_first_chunk_carries_text(replica, gate):
    body = {**COMMON, "prompt": "Once upon a time", "max_tokens": 8}
    first = _payloads(first_bytes_after_prefill(replica, gate, "/v1/completions", body))[0]
    assert first["choices"][0]["text"]


def test_anthropic_opening_leaves_with_the_first_text(replica, gate):
    body = {**COMMON, "messages": HELLO, "max_tokens": 8}
    raw = first_bytes_after_prefill(replica, gate, "/v1/messages", body)
    kinds = [p["type"] for p in _payloads(raw)]
    assert kinds[0] == "message_start"
    assert "content_block_delta" in kinds or "message_stop" in kinds  # the opening came with content


def test_responses_opening_leaves_with_the_first_text(replica, gate):
    body = {**COMMON, "input": "Say something.", "max_output_tokens": 8}
    raw = first_bytes_after_prefill(replica, gate, "/v1/responses", body)
    kinds = [p["type"] for p in _payloads(raw)]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert "response.output_text.delta" in kinds or "response.completed" in kinds
