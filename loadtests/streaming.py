"""Shared by the chat locustfiles: one streaming OpenAI chat request, timed token by token.

Besides Locust's own entry for the HTTP request, each request reports two custom request events
(timed by ``measurement.StreamTimer``, reported when the stream ends):

- ``TTFT <name>``: from sending the request to the first streamed content chunk (ms);
- ``ITL <name>``: the gap between consecutive content chunks (ms), one event per gap.

Settings come from the environment so one locustfile serves every deployment:
``CHASSIS_MODEL`` (default: the first model of ``GET /v1/models``), ``CHASSIS_API_KEY``,
``CHASSIS_MAX_TOKENS`` (default 32), ``CHASSIS_MIN_TOKENS`` (vLLM's ``min_tokens``, sent when set: make
it equal to ``CHASSIS_MAX_TOKENS`` for fixed output lengths; a sampled model may otherwise end a reply
at its first token, and a reply without content has no TTFT).
"""

from __future__ import annotations

import os

from locust import HttpUser

from measurement import StreamTimer, time_stream

TTFT = "TTFT"
ITL = "ITL"


class StreamingChatUser(HttpUser):
    """Base class: subclasses add @task methods that call ``stream_chat``."""

    abstract = True
    max_tokens = int(os.environ.get("CHASSIS_MAX_TOKENS", "32"))
    min_tokens = int(os.environ.get("CHASSIS_MIN_TOKENS", "0"))

    def on_start(self) -> None:
        api_key = os.environ.get("CHASSIS_API_KEY")
        if api_key:
            self.client.headers["Authorization"] = f"Bearer {api_key}"
        self.model = os.environ.get("CHASSIS_MODEL") or self._first_model()

    def _first_model(self) -> str:
        with self.client.get("/v1/models", name="/v1/models", catch_response=True) as response:
            try:
                return response.json()["data"][0]["id"]
            except (ValueError, KeyError, IndexError):
                response.failure(f"no model in /v1/models: {response.text[:200]}")
                raise RuntimeError("set CHASSIS_MODEL: /v1/models lists no model") from None

    def _event(self, kind: str, name: str, millis: float, length: int = 0, exception=None) -> None:
        self.environment.events.request.fire(
            request_type=kind,
            name=name,
            response_time=millis,
            response_length=length,
            exception=exception,
            context={},
        )

    def stream_chat(self, messages: list[dict], name: str) -> str | None:
        """POST a streaming chat completion; returns the assistant's text (None on failure)."""
        body = {
            "model": self.model,
            "messages": messages,
            "max_tokens": self.max_tokens,
            "stream": True,
            "temperature": 0.7,
        }
        if self.min_tokens:
            body["min_tokens"] = self.min_tokens
        timer = StreamTimer()
        with self.client.post(
            "/v1/chat/completions", json=body, stream=True, catch_response=True, name=name
        ) as response:
            if response.status_code != 200:
                response.failure(f"HTTP {response.status_code}: {response.text[:200]}")
                return None
            try:
                record = time_stream(response.iter_lines(), timer)
            except Exception as exc:  # a broken stream fails this request, not the whole user
                response.failure(f"stream broke: {exc!r}")
                return None
            if record.error is not None:
                response.failure(f"stream broke: error event: {record.error}")
                return None
            if record.ttft_s is None:
                response.failure(f"the stream carried no content (finish_reason {record.finish_reason})")
                self._event(TTFT, name, record.e2e_s * 1000, exception=RuntimeError("no token"))
                return None
            self._event(TTFT, name, record.ttft_s * 1000)
            for gap in record.itl_s:
                self._event(ITL, name, gap * 1000)
            response.success()
        return record.text
