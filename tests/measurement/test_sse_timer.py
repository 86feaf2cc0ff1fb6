"""The SSE stream timer on scripted streams: the test sets the clock before each chunk arrives."""

import asyncio
import json

import pytest

from measurement import StreamRecord, StreamTimer, atime_stream, time_stream


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def chat_chunk(content: str | None = None, role: str | None = None, finish: str | None = None) -> str:
    delta = {key: value for key, value in (("role", role), ("content", content)) if value is not None}
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    return "data: " + json.dumps({"object": "chat.completion.chunk", "choices": [choice]})


USAGE = {"prompt_tokens": 12, "completion_tokens": 3, "prompt_tokens_details": {"cached_tokens": 8}}
# (arrival time, line): a role-only chunk long before the first content, blank separator lines,
# a usage chunk with no choices, then [DONE] and a line that must not be read.
CHAT_STREAM = [
    (100.5, chat_chunk(role="assistant", content="")),
    (100.5, ""),
    (101.0, chat_chunk("Hel")),
    (101.0, ""),
    (101.25, chat_chunk("lo")),
    (101.75, chat_chunk(" there", finish="length")),
    (101.8, "data: " + json.dumps({"choices": [], "usage": USAGE})),
    (101.9, "data: [DONE]"),
    (150.0, chat_chunk("after done")),
]


def scripted(clock: FakeClock, stream):
    for arrival, line in stream:
        clock.now = arrival
        yield line


async def ascripted(clock: FakeClock, stream):
    for arrival, line in stream:
        clock.now = arrival
        yield line


def test_ttft_is_the_first_content_chunk_not_the_role_chunk():
    clock = FakeClock()
    record = time_stream(scripted(clock, CHAT_STREAM), StreamTimer(clock))
    assert record.ttft_s == pytest.approx(1.0)  # the role chunk came at 0.5 s
    assert record.itl_s == pytest.approx([0.25, 0.5])
    assert record.e2e_s == pytest.approx(1.9)  # ends at [DONE]; the later line is not read
    assert record.text == "Hello there" and record.content_chunks == 3
    assert record.finish_reason == "length" and record.finish_s == pytest.approx(1.75)
    assert record.done and record.error is None
    assert (record.output_tokens, record.prompt_tokens, record.cached_tokens) == (3, 12, 8)
    assert record.lines == 8


def test_sync_and_async_give_the_same_record():
    sync_clock, async_clock = FakeClock(), FakeClock()
    sync_record = time_stream(scripted(sync_clock, CHAT_STREAM), StreamTimer(sync_clock))
    async_record = asyncio.run(atime_stream(ascripted(async_clock, CHAT_STREAM), StreamTimer(async_clock)))
    assert async_record == sync_record


def test_completions_text_bytes_lines_and_parsed_events():
    clock = FakeClock()
    stream = [
        (100.2, b'data: {"choices": [{"index": 0, "text": "a"}]}'),
        (100.3, {"choices": [{"index": 0, "text": ""}]}),  # a step that produced no text
        (100.7, {"choices": [{"index": 0, "text": "b", "finish_reason": "stop"}]}),
    ]
    record = time_stream(scripted(clock, stream), StreamTimer(clock))
    assert record.ttft_s == pytest.approx(0.2) and record.itl_s == pytest.approx([0.5])
    assert record.text == "ab" and record.output_tokens == 2  # no usage: one token per content chunk
    assert record.e2e_s == pytest.approx(0.7) and not record.done
    assert record.lines == 1  # parsed events are not lines


def test_an_error_event_ends_the_stream_and_is_recorded():
    clock = FakeClock()
    stream = [
        (101.0, chat_chunk("x")),
        (102.0, 'data: {"error": {"message": "engine died", "code": 500}}'),
        (103.0, chat_chunk("never")),
    ]
    record = time_stream(scripted(clock, stream), StreamTimer(clock))
    assert "engine died" in record.error
    assert record.text == "x" and record.e2e_s == pytest.approx(2.0)


def test_a_stream_without_content_has_no_ttft():
    clock = FakeClock()
    stream = [(100.4, chat_chunk(role="assistant", content="")), (100.6, chat_chunk(finish="stop"))]
    record = time_stream(scripted(clock, stream), StreamTimer(clock))
    assert record.ttft_s is None and record.itl_s == [] and record.output_tokens == 0
    assert record.finish_reason == "stop" and record.finish_s == pytest.approx(0.6)


def test_finish_is_idempotent_and_an_empty_stream_is_timed():
    clock = FakeClock()
    timer = StreamTimer(clock)
    clock.now = 104.0
    assert time_stream([], timer) == StreamRecord(e2e_s=4.0)
    clock.now = 200.0
    assert timer.finish().e2e_s == 4.0


def test_a_malformed_data_line_raises():
    with pytest.raises(ValueError):
        time_stream(["data: {not json"])
