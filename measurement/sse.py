"""What a client sees of one streamed OpenAI-style response: TTFT, inter-token latency, end to end.

One ``StreamTimer`` holds the rules; ``time_stream`` and ``atime_stream`` only feed it lines, from a
plain iterator (requests, Locust) or an async one (httpx's ``aiter_lines``).

- TTFT: from the timer's creation (make it just before sending the request) to the first chunk that
  carries content text. The first byte, a chat stream's opening role-only chunk (``"content": ""``)
  and usage-only chunks do not count.
- ITL: the gap between consecutive content chunks (one chunk per decode step that produced text, as
  in vLLM's ``benchmark_serving``).
- End to end: from creation to ``[DONE]``, an error event or the end of the lines, whichever first.

Content is ``choices[].delta.content`` (Chat Completions) or ``choices[].text`` (Completions).
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

SseItem = str | bytes | Mapping[str, Any]
_DONE = object()


@dataclass
class StreamRecord:
    ttft_s: float | None = None
    itl_s: list[float] = field(default_factory=list)
    e2e_s: float | None = None
    lines: int = 0  # SSE lines received, blank ones too: more than 0 means the body began
    content_chunks: int = 0
    pieces: list[str] = field(default_factory=list)
    usage: dict | None = None
    finish_reason: str | None = None
    finish_s: float | None = None  # from the start to the chunk that carried finish_reason
    error: str | None = None  # the payload of an error event; it ends the stream
    done: bool = False  # the stream ended with ``data: [DONE]``

    @property
    def text(self) -> str:
        return "".join(self.pieces)

    @property
    def output_tokens(self) -> int:
        """The server's ``usage.completion_tokens`` if it sent usage, else the content chunks."""
        reported = (self.usage or {}).get("completion_tokens")
        return reported if reported is not None else self.content_chunks

    @property
    def prompt_tokens(self) -> int:
        return (self.usage or {}).get("prompt_tokens", 0) or 0

    @property
    def cached_tokens(self) -> int:
        details = (self.usage or {}).get("prompt_tokens_details") or {}
        return details.get("cached_tokens", 0) or 0


def _parse_data_line(line: str | bytes) -> Mapping[str, Any] | object | None:
    """The JSON of a ``data:`` line, ``_DONE`` for ``data: [DONE]``, None for any other line."""
    if isinstance(line, bytes):
        line = line.decode("utf-8")
    if not line.startswith("data:"):
        return None
    data = line[5:].strip()
    return _DONE if data == "[DONE]" else json.loads(data)


def _content(choice: Mapping[str, Any]) -> str:
    return (choice.get("delta") or {}).get("content") or choice.get("text") or ""


class StreamTimer:
    """Feed it the stream's lines (or parsed events) in arrival order; ``finish()`` gives the record.

    ``clock`` returns seconds; tests pass a fake one to script when each chunk arrives.
    """

    def __init__(self, clock: Callable[[], float] = time.perf_counter):
        self._clock = clock
        self.started = clock()
        self._last_content: float | None = None
        self.record = StreamRecord()

    def feed(self, item: SseItem) -> bool:
        """Take one SSE line or parsed event; False once the stream has ended (``[DONE]``, error)."""
        if isinstance(item, Mapping):
            return self._take(item)
        self.record.lines += 1
        event = _parse_data_line(item)
        if event is _DONE:
            self.record.done = True
            return False
        return True if event is None else self._take(event)

    def _take(self, event: Mapping[str, Any]) -> bool:
        record = self.record
        if "error" in event:
            record.error = str(event["error"])
            return False
        if event.get("usage"):
            record.usage = event["usage"]
        choices = event.get("choices") or []
        text = "".join(_content(choice) for choice in choices)
        finish_reason = next((c["finish_reason"] for c in choices if c.get("finish_reason")), None)
        if not text and finish_reason is None:
            return True
        now = self._clock()
        if text:
            if self._last_content is None:
                record.ttft_s = now - self.started
            else:
                record.itl_s.append(now - self._last_content)
            self._last_content = now
            record.content_chunks += 1
            record.pieces.append(text)
        if finish_reason is not None and record.finish_reason is None:
            record.finish_reason = finish_reason
            record.finish_s = now - self.started
        return True

    def finish(self) -> StreamRecord:
        """Close the record (end-to-end time); later calls return it unchanged."""
        if self.record.e2e_s is None:
            self.record.e2e_s = self._clock() - self.started
        return self.record


def time_stream(lines: Iterable[SseItem], timer: StreamTimer | None = None) -> StreamRecord:
    timer = timer or StreamTimer()
    for line in lines:
        if not timer.feed(line):
            break
    return timer.finish()


async def atime_stream(lines: AsyncIterable[SseItem], timer: StreamTimer | None = None) -> StreamRecord:
    timer = timer or StreamTimer()
    async for line in lines:
        if not timer.feed(line):
            break
    return timer.finish()
