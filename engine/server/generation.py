"""Run the n engine requests of one API call and turn their outputs into API-neutral events.

Every API handler goes through ``generate_choices``: it admits one engine request per choice,
merges their outputs, runs the tool-call parser of each choice, records metrics, and — when the
consumer stops early (client gone, error) — closes every engine stream, which aborts the request
and frees its KV blocks.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from engine.clients.protocol import EngineClient
from engine.server.conversation import ChoiceResult, TokenLogprob, Usage
from engine.server.metrics import ServerMetrics
from engine.server.reasoning import ReasoningParser
from engine.server.tool_parsers import ToolCall, ToolParser


@dataclass
class ChoiceEvent:
    index: int
    content: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    logprobs: list[TokenLogprob] = field(default_factory=list)
    token_ids: list[int] = field(default_factory=list)
    finished: bool = False
    finish_reason: str | None = None
    stop_reason: str | int | None = None
    prompt_tokens: int = 0
    cached_tokens: int = 0
    reasoning: str = ""
    reasoning_tokens: int = 0  # of ``token_ids``, those generated inside the reasoning


def _logprobs(new_logprobs: Sequence[Any] | None) -> list[TokenLogprob]:
    return [
        TokenLogprob(int(lp.token_id), float(lp.logprob), [(int(t), float(v)) for t, v in (lp.top or [])])
        for lp in new_logprobs or []
    ]


async def _pump(
    stream: AsyncIterator[Any],
    prompt: list[int],
    index: int,
    make_parser: Callable[[], ToolParser] | None,
    metrics: ServerMetrics,
    queue: asyncio.Queue,
    make_reasoning: Callable[[], ReasoningParser] | None = None,
) -> None:
    parser = make_parser() if make_parser else None
    reasoning = make_reasoning() if make_reasoning else None
    finished = False
    last_token_at: float | None = None
    try:
        async for out in stream:
            now = time.monotonic()
            new_ids = list(out.new_token_ids or [])
            if new_ids and last_token_at is not None:
                gap = (now - last_token_at) / len(new_ids)
                for _ in new_ids:
                    metrics.inter_token_latency.observe(gap)
            if new_ids:
                last_token_at = now
            event = ChoiceEvent(
                index=index,
                token_ids=new_ids,
                logprobs=_logprobs(out.new_logprobs),
                prompt_tokens=len(out.prompt_token_ids or prompt),
                cached_tokens=int(out.num_cached_tokens or 0),
            )
            text = out.new_text or ""
            if reasoning is not None:
                if reasoning.in_reasoning:
                    event.reasoning_tokens = len(new_ids)
                split = reasoning.feed(text)
                if out.finished:
                    rest = reasoning.finish()
                    split.reasoning += rest.reasoning
                    split.content += rest.content
                event.reasoning, text = split.reasoning, split.content
            if parser is None:
                event.content = text
            else:
                delta = parser.feed(text)
                if out.finished:
                    delta.extend(parser.finish())
                event.content, event.tool_calls = delta.content, delta.tool_calls
            if out.finished:
                finished = True
                event.finished = True
                event.finish_reason = out.finish_reason
                event.stop_reason = out.stop_reason
                metrics.request_finished(
                    out.metrics,
                    out.finish_reason,
                    len(out.prompt_token_ids or prompt),
                    len(out.token_ids or []),
                )
            await queue.put(event)
            if finished:
                return
        # The stream ended without a final output: report the choice as aborted.
        finished = True
        metrics.request_finished(None, "abort")
        await queue.put(ChoiceEvent(index=index, finished=True, finish_reason="abort"))
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # handed to the consumer, which turns it into an API error
        await queue.put(exc)
    finally:
        await stream.aclose()
        if not finished:
            metrics.request_finished(None, "abort")


async def generate_choices(
    engine: EngineClient,
    prompt: list[int],
    params_list: Sequence[Any],
    request_id: str,
    metrics: ServerMetrics,
    make_parser: Callable[[], ToolParser] | None = None,
    cache_salt: str | None = None,
    make_reasoning: Callable[[], ReasoningParser] | None = None,
) -> AsyncIterator[ChoiceEvent]:
    """Admit every choice now, so that a prompt the engine refuses raises (ValueError) before any
    response is sent, streaming or not; then the events of all choices, interleaved as produced."""
    streams: list[AsyncIterator[Any]] = []
    try:
        for i, params in enumerate(params_list):
            streams.append(
                engine.generate(prompt, params, request_id=f"{request_id}-{i}", cache_salt=cache_salt)
            )
    except BaseException:
        await asyncio.gather(*(stream.aclose() for stream in streams), return_exceptions=True)
        raise
    max_tokens = getattr(params_list[0], "max_tokens", None) if params_list else None
    return _merged(streams, prompt, metrics, make_parser, max_tokens, make_reasoning)


async def _merged(
    streams: list[AsyncIterator[Any]],
    prompt: list[int],
    metrics: ServerMetrics,
    make_parser: Callable[[], ToolParser] | None,
    max_tokens: int | None = None,
    make_reasoning: Callable[[], ReasoningParser] | None = None,
) -> AsyncIterator[ChoiceEvent]:
    """Events of all choices, interleaved as produced; ends when every choice has finished."""
    queue: asyncio.Queue = asyncio.Queue()
    tasks = [
        asyncio.create_task(_pump(stream, prompt, i, make_parser, metrics, queue, make_reasoning))
        for i, stream in enumerate(streams)
    ]
    remaining = len(tasks)
    generated = [0] * len(tasks)
    try:
        while remaining:
            item = await queue.get()
            if isinstance(item, Exception):
                raise item
            generated[item.index] += len(item.token_ids)
            if item.finished:
                remaining -= 1
                if not remaining:
                    metrics.call_finished(len(tasks), max_tokens, generated)
            yield item
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def count_usage(usage: Usage, event: ChoiceEvent) -> None:
    """Add one event to a call's usage; the prompt is counted once, as OpenAI does for n > 1."""
    usage.prompt_tokens = event.prompt_tokens
    if event.index == 0:
        usage.cached_tokens = max(usage.cached_tokens, event.cached_tokens)
    usage.completion_tokens += len(event.token_ids)
    usage.reasoning_tokens += event.reasoning_tokens


async def collect(events: AsyncIterator[ChoiceEvent], n: int) -> tuple[list[ChoiceResult], Usage]:
    """Drain the events of a non-streaming call into finished choices and usage."""
    choices = [ChoiceResult(index=i) for i in range(n)]
    usage = Usage()
    async for event in events:
        choice = choices[event.index]
        choice.text += event.content
        choice.reasoning += event.reasoning
        choice.reasoning_tokens += event.reasoning_tokens
        choice.tool_calls.extend(event.tool_calls)
        choice.token_ids.extend(event.token_ids)
        choice.logprobs.extend(event.logprobs)
        count_usage(usage, event)
        if event.finished:
            choice.finish_reason, choice.stop_reason = event.finish_reason, event.stop_reason
    return choices, usage
