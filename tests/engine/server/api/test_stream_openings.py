"""No API's stream says anything before the engine's first output, and then it opens with content.

Clients time the first token at the first chunk, so an opening sent before prefill makes their
TTFT far too low. Each stream builder is fed from a source the test drives: the test learns each
time the builder asks for the next engine output, and checks that nothing was yielded meanwhile.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

from engine.server.api import anthropic_messages, completions, openai_chat, responses
from engine.server.api.common import TokenText
from engine.server.api.response_store import ResponseStore
from engine.server.generation import ChoiceEvent
from engine.server.protocol.openai import ChatCompletionRequest, CompletionRequest
from engine.server.protocol.responses import ResponsesRequest


class Engine:
    """Engine outputs put by the test, and a signal each time the stream asks for the next one."""

    def __init__(self) -> None:
        self.outputs: asyncio.Queue[ChoiceEvent | None] = asyncio.Queue()
        self.asks: asyncio.Queue[int] = asyncio.Queue()

    async def events(self) -> AsyncIterator[ChoiceEvent]:
        asked = 0
        while True:
            asked += 1
            self.asks.put_nowait(asked)
            item = await self.outputs.get()
            if item is None:
                return
            yield item


async def _first_write(make_stream, outputs: list[ChoiceEvent]) -> str:
    """What a stream writes first when the engine's outputs are ``outputs``, asserting that it wrote
    nothing before it consumed the last of them (it asked for each next one instead)."""
    engine = Engine()
    stream = make_stream(engine.events())
    write = asyncio.ensure_future(anext(stream))
    try:
        for i, output in enumerate(outputs):
            ask = asyncio.ensure_future(engine.asks.get())
            await asyncio.wait({write, ask}, return_when=asyncio.FIRST_COMPLETED)
            assert not write.done(), f"written before engine output {i}: {write.result()!r}"
            engine.outputs.put_nowait(output)
        ask = asyncio.ensure_future(engine.asks.get())
        await asyncio.wait({write, ask}, return_when=asyncio.FIRST_COMPLETED)
        assert write.done(), "nothing written for the last engine output"
        ask.cancel()
        return write.result()
    finally:
        write.cancel()
        await stream.aclose()


def first_write(make_stream, *outputs: ChoiceEvent) -> str:
    return asyncio.run(_first_write(make_stream, list(outputs)))


def token(text: str, token_id: int = 7) -> ChoiceEvent:
    return ChoiceEvent(index=0, content=text, token_ids=[token_id], prompt_tokens=5)


def data_payloads(write: str) -> list[dict]:
    lines = write.splitlines()
    return [json.loads(line[6:]) for line in lines if line.startswith("data: ") and line != "data: [DONE]"]


def event_names(write: str) -> list[str]:
    return [line[7:] for line in write.splitlines() if line.startswith("event: ")]


class _Text:
    """Token text for logprobs."""

    def decode(self, ids: list[int]) -> str:
        return f"<{ids[0]}>"


def _chat(**extra) -> ChatCompletionRequest:
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True, **extra}
    return ChatCompletionRequest.model_validate(body)


def chat_stream(req: ChatCompletionRequest):
    return lambda events: openai_chat.stream_response(req, "m", events, TokenText(_Text()))


def test_chat_first_chunk_carries_the_role_and_the_first_text():
    write = first_write(chat_stream(_chat()), token("Hello"))
    [chunk] = data_payloads(write)
    assert chunk["choices"][0]["delta"] == {"role": "assistant", "content": "Hello"}


def test_chat_token_that_decodes_to_nothing_sends_no_chunk():
    # A skipped special token (or half of a UTF-8 character) is not progress a client can see.
    write = first_write(chat_stream(_chat()), token("", token_id=1), token("Hi"))
    [chunk] = data_payloads(write)
    assert chunk["choices"][0]["delta"] == {"role": "assistant", "content": "Hi"}


def test_chat_role_rides_on_the_first_chunk_of_each_choice():
    async def run() -> list[dict]:
        outputs = [
            ChoiceEvent(index=1, content="B", token_ids=[3], prompt_tokens=5),
            ChoiceEvent(index=0, content="A", token_ids=[4], prompt_tokens=5),
            ChoiceEvent(
                index=1, content="b", token_ids=[5], prompt_tokens=5, finished=True, finish_reason="stop"
            ),
            ChoiceEvent(
                index=0, content="a", token_ids=[6], prompt_tokens=5, finished=True, finish_reason="stop"
            ),
        ]

        async def events() -> AsyncIterator[ChoiceEvent]:
            for output in outputs:
                yield output

        writes = [w async for w in chat_stream(_chat(n=2))(events())]
        return [p["choices"][0] for w in writes for p in data_payloads(w) if "choices" in p]

    choices = asyncio.run(run())
    assert [(c["index"], c["delta"]) for c in choices] == [
        (1, {"role": "assistant", "content": "B"}),
        (0, {"role": "assistant", "content": "A"}),
        (1, {"content": "b"}),
        (0, {"content": "a"}),
    ]


def test_completions_first_chunk_carries_the_first_text():
    req = CompletionRequest.model_validate({"model": "m", "prompt": "hi", "stream": True})
    write = first_write(
        lambda events: completions.stream_response(req, "m", events, TokenText(_Text())),
        token("", token_id=1),
        token("Hello"),
    )
    [chunk] = data_payloads(write)
    assert chunk["choices"][0]["text"] == "Hello"


def test_anthropic_message_start_leaves_with_the_first_text():
    write = first_write(
        lambda events: anthropic_messages.stream_response("m", events), token(""), token(" "), token("Hi")
    )
    assert event_names(write) == ["message_start", "content_block_start", "content_block_delta"]
    start, _, delta = data_payloads(write)
    assert start["message"]["usage"]["input_tokens"] == 5
    assert delta["delta"] == {"type": "text_delta", "text": " Hi"}


def test_responses_openings_leave_with_the_first_text():
    req = ResponsesRequest.model_validate({"model": "m", "input": "hi", "stream": True})
    builder = responses.ResponseBuilder(req, "m")
    write = first_write(lambda events: builder.stream(events, ResponseStore(4), []), token(""), token("Hi"))
    assert event_names(write) == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
    ]
    payloads = data_payloads(write)
    assert [p["sequence_number"] for p in payloads] == [0, 1, 2, 3, 4]
    assert payloads[-1]["delta"] == "Hi"
