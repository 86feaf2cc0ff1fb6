"""Send fuzzed requests to a live inference API (a replica or the gateway) and check what every
answer must be, whatever the request: never a server error; a client error in the API's own error
JSON naming what is wrong; a stream that ends as the API ends it."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

import httpx
from hypothesis import HealthCheck, settings

from tests.support import api_strategies as strategies

# Reproducible in CI (the same examples every run) and bounded: about a minute per deployable.
FUZZ = settings(
    max_examples=150,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
RAW_FUZZ = settings(FUZZ, max_examples=40)


@dataclass(frozen=True)
class Endpoint:
    path: str
    bodies: object  # model name -> strategy of request bodies
    anthropic: bool = False  # errors in Anthropic's shape
    stream_end: tuple[str, ...] = ()  # the last SSE event of a stream (its data, or its event name)


ENDPOINTS = {
    "chat": Endpoint("/v1/chat/completions", strategies.chat_bodies, stream_end=("[DONE]",)),
    "completions": Endpoint("/v1/completions", strategies.completion_bodies, stream_end=("[DONE]",)),
    "messages": Endpoint("/v1/messages", strategies.messages_bodies, True, ("message_stop",)),
    "count_tokens": Endpoint("/v1/messages/count_tokens", strategies.count_tokens_bodies, True),
    "responses": Endpoint(
        "/v1/responses", strategies.responses_bodies, stream_end=("response.completed", "response.incomplete")
    ),
}


def send(client: httpx.Client, url: str, body, headers: dict) -> tuple[httpx.Response, str]:
    """POST ``body`` (a JSON value, or a RawBody as it is) and read the whole answer, streamed or not."""
    if isinstance(body, strategies.RawBody):
        content = body.content
        headers = {**headers, "content-type": body.content_type} if body.content_type else headers
    else:
        content = json.dumps(body).encode()
        headers = {**headers, "content-type": "application/json"}
    with client.stream("POST", url, content=content, headers=headers) as response:
        return response, response.read().decode("utf-8", errors="replace")


def check_answer(endpoint: Endpoint, body, response: httpx.Response, text: str) -> None:
    """``body`` was sent to ``endpoint`` and got ``response`` (whose whole text is ``text``)."""
    status = response.status_code
    assert status < 500, f"server error {status}: {text[:2000]}"
    if status >= 400:
        _check_error(endpoint, body, status, text)
    elif response.headers.get("content-type", "").startswith("text/event-stream"):
        _check_stream(endpoint, text)
    else:
        assert isinstance(json.loads(text), dict), text[:2000]


def _check_error(endpoint: Endpoint, sent, status: int, text: str) -> None:
    body = json.loads(text)
    if endpoint.anthropic:
        assert body.get("type") == "error", text
    error = body.get("error")
    assert isinstance(error, dict) and error.get("type") and error.get("message"), text
    if status == 400:
        assert _names_a_field(error, sent), f"names no field: {text}"


# A parameter quoted in the message ('max_tokens', `model`, messages[0].content).
_QUOTED = re.compile(r"['`][\w.\[\]-]+['`]|\b\w+\[\d+\]")
# A body that is not a JSON object at all has no field to name.
_ABOUT_THE_BODY = re.compile(r"JSON|body|nested", re.IGNORECASE)


def _names_a_field(error: dict, sent) -> bool:
    """OpenAI's ``param``, or a field quoted or named (as a key of the request) in the message."""
    message = error["message"]
    if error.get("param") or _QUOTED.search(message) or _ABOUT_THE_BODY.search(message):
        return True
    words = set(re.findall(r"\w+", message))
    return any(key in words for key in _keys(sent))


def _keys(value) -> set[str]:
    if isinstance(value, strategies.RawBody):
        try:
            value = json.loads(value.content)
        except (ValueError, RecursionError):
            return set()
    if isinstance(value, dict):
        return {key for key in value if key.isidentifier()} | {k for v in value.values() for k in _keys(v)}
    if isinstance(value, list):
        return {k for v in value for k in _keys(v)}
    return set()


def _check_stream(endpoint: Endpoint, text: str) -> None:
    events = [block for block in text.split("\n\n") if block.strip()]
    assert events, "an empty stream"
    for block in events:
        for line in block.split("\n"):  # SSE lines end at \n only; U+0085 or U+2028 may be data
            if line.startswith("event:"):
                assert line.split(":", 1)[1].strip() != "error", f"an error inside the stream: {block}"
            if line.startswith("data:") and line != "data: [DONE]":
                payload = json.loads(line[5:])
                in_band = payload.get("type") == "error" or isinstance(payload.get("error"), dict)
                assert not in_band, f"an error inside the stream: {block}"
    last = events[-1]
    ends = [f"data: {end}" for end in endpoint.stream_end] + [f"event: {end}" for end in endpoint.stream_end]
    assert any(last.startswith(end) for end in ends), f"the stream ends with {last!r}"


def assert_healthy(client: httpx.Client, base_url: str, model: str, headers: dict[str, str]) -> None:
    """/health and /metrics answer 200 (the fuzz's odd field names, counted as labels, still render)
    and an ordinary chat request still gets its answer."""
    assert client.get(f"{base_url}/health").status_code == 200
    assert client.get(f"{base_url}/metrics").status_code == 200
    body = {"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    answer = client.post(f"{base_url}/v1/chat/completions", json=body, headers=headers)
    assert answer.status_code == 200, answer.text
    assert answer.json()["choices"][0]["finish_reason"] in ("length", "stop")
