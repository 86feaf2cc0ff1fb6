"""The benchmark load generator: streaming OpenAI chat requests over async httpx, timed per token.

Pure (no Django), so it runs in a Celery task's helper thread and in tests alike. ``concurrency``
workers take conversations from a shared queue and send their turns one after another, round-robin
over the target base URLs. Each request records its time to first token (TTFT: from sending to the
first streamed content) and the gaps between later content chunks (inter-token latency, ITL).

Stopping: set ``stop`` (a ``threading.Event``); workers check it before each request, so a cancelled
run ends after the requests in flight.
"""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass, field

import httpx

from controlplane.benchmarks.prompts import (
    Conversation,
    build_conversations,
    fixed_length_conversations,
    request_count,
)
from measurement import StreamTimer, Summary, atime_stream


@dataclass(frozen=True)
class LoadSpec:
    workload: str
    requests: int
    concurrency: int
    max_tokens: int
    seed: int
    model: str
    api_key: str = ""
    timeout_s: float = 120.0
    input_tokens: int | None = None  # a sweep point's prompt length; None: the workload's prompts
    prompt_salt: str = ""  # distinct prompts per sweep point, so no point hits another's prefix cache


@dataclass
class RequestSample:
    index: int  # order of sending
    conversation: int
    turn: int
    start_s: float  # from the start of the run
    ok: bool = False
    ttft_s: float | None = None
    itl_s: list[float] = field(default_factory=list)
    output_tokens: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    latency_s: float = 0.0
    error: str = ""


@dataclass
class Progress:
    """Read by another thread while the run goes (plain ints: safe to read under the GIL)."""

    total: int
    completed: int = 0
    failed: int = 0


@dataclass
class LoadResult:
    samples: list[RequestSample]
    wall_s: float
    stopped: bool  # the stop event ended it early


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 3)


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def summarize(result: LoadResult) -> dict:
    """The run's figures: counts, latency percentiles (ms), throughput, and the commonest errors."""
    ok = [s for s in result.samples if s.ok]
    failed = [s for s in result.samples if not s.ok]
    ttft = Summary.of(s.ttft_s for s in ok if s.ttft_s is not None)
    itl = Summary.of(gap for s in ok for gap in s.itl_s)
    output_tokens = sum(s.output_tokens for s in ok)
    uncached_input = sum(max(0, s.prompt_tokens - s.cached_tokens) for s in ok)
    # A user's decode speed: tokens after the first over the time after the first, pooled over the
    # requests (one request whose later tokens arrived in one burst would make a median meaningless).
    decoding = [s for s in ok if s.ttft_s is not None and s.output_tokens > 1 and s.latency_s > s.ttft_s]
    decode_s = sum(s.latency_s - s.ttft_s for s in decoding)
    per_user = sum(s.output_tokens - 1 for s in decoding) / decode_s if decode_s > 0 else None
    errors: dict[str, int] = {}
    for sample in failed:
        errors[sample.error] = errors.get(sample.error, 0) + 1
    wall = result.wall_s
    return {
        "requests_ok": len(ok),
        "requests_failed": len(failed),
        "duration_s": round(wall, 3),
        "ttft_p50_ms": _ms(ttft.p50),
        "ttft_p90_ms": _ms(ttft.p90),
        "ttft_p99_ms": _ms(ttft.p99),
        "itl_p50_ms": _ms(itl.p50),
        "itl_p99_ms": _ms(itl.p99),
        "output_tokens": output_tokens,
        "output_tokens_per_s": round(output_tokens / wall, 3) if wall > 0 else None,
        "prompt_tokens": sum(s.prompt_tokens for s in ok),
        "uncached_input_tokens_per_s": round(uncached_input / wall, 3) if wall > 0 else None,
        "per_user_output_tokens_per_s": _round(per_user),
        "requests_per_s": round(len(ok) / wall, 3) if wall > 0 else None,
        "errors": dict(sorted(errors.items(), key=lambda item: -item[1])[:5]),
    }


def chart_samples(samples: list[RequestSample], limit: int) -> list[list]:
    """[start s, TTFT ms, mean ITL ms, ok] per request, evenly thinned to at most ``limit``."""
    ordered = sorted(samples, key=lambda s: s.start_s)
    if len(ordered) > limit:
        step = len(ordered) / limit
        ordered = [ordered[int(i * step)] for i in range(limit)]
    return [
        [
            round(s.start_s, 3),
            _ms(s.ttft_s),
            _ms(sum(s.itl_s) / len(s.itl_s)) if s.itl_s else None,
            s.ok,
        ]
        for s in ordered
    ]


async def _stream_chat(
    client: httpx.AsyncClient,
    url: str,
    spec: LoadSpec,
    messages: list[dict],
    sample: RequestSample,
    t0: float,
) -> str:
    """Send one streaming request, fill ``sample``; returns the reply text for the next turn."""
    body = {
        "model": spec.model,
        "messages": messages,
        "max_tokens": spec.max_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
        # Sampled with a per-request seed: reproducible, and no greedy loop on one odd token.
        "temperature": 1.0,
        "seed": spec.seed * 1_000_003 + sample.index,
        "ignore_eos": True,  # fixed output lengths make runs comparable
    }
    headers = {"Authorization": f"Bearer {spec.api_key}"} if spec.api_key else {}
    timer = StreamTimer()
    sample.start_s = timer.started - t0
    try:
        async with client.stream(
            "POST", f"{url}/v1/chat/completions", json=body, headers=headers
        ) as response:
            if response.status_code != 200:
                text = (await response.aread()).decode(errors="replace")
                sample.error = f"HTTP {response.status_code}: {text[:200]}"
                return ""
            await atime_stream(response.aiter_lines(), timer)
    except httpx.HTTPError as exc:
        sample.error = f"{type(exc).__name__}: {exc or 'no detail'}"[:300]
        return ""
    except ValueError as exc:  # a malformed SSE payload
        sample.error = f"bad stream: {exc}"[:300]
        return ""
    finally:
        record = timer.finish()
        sample.latency_s, sample.ttft_s, sample.itl_s = record.e2e_s, record.ttft_s, record.itl_s
    if record.error is not None:
        sample.error = f"error event: {record.error[:200]}"
        return ""
    if record.ttft_s is None:
        sample.error = "the stream carried no content"
        return ""
    sample.ok = True
    sample.output_tokens = record.output_tokens
    sample.prompt_tokens, sample.cached_tokens = record.prompt_tokens, record.cached_tokens
    return record.text


async def run_load(
    urls: list[str], spec: LoadSpec, stop: threading.Event | None = None, progress: Progress | None = None
) -> LoadResult:
    if not urls:
        raise ValueError("no target URL to send requests to")
    if spec.input_tokens is None:
        conversations = build_conversations(spec.workload, spec.requests, spec.seed)
    else:
        conversations = fixed_length_conversations(
            spec.requests, spec.input_tokens, spec.seed, spec.prompt_salt
        )
    progress = progress or Progress(total=request_count(conversations))
    stop = stop or threading.Event()
    queue: asyncio.Queue[Conversation] = asyncio.Queue()
    for conversation in conversations:
        queue.put_nowait(conversation)
    samples: list[RequestSample] = []
    sent = 0
    t0 = time.perf_counter()

    async def converse(client: httpx.AsyncClient, conversation: Conversation) -> None:
        nonlocal sent
        history = [{"role": "system", "content": conversation.system}] if conversation.system else []
        for turn, text in enumerate(conversation.user_turns):
            if stop.is_set():
                return
            sample = RequestSample(sent, conversation.index, turn, 0.0)
            url = urls[sent % len(urls)]
            sent += 1
            samples.append(sample)
            history.append({"role": "user", "content": text})
            reply = await _stream_chat(client, url, spec, history, sample, t0)
            progress.completed += 1
            progress.failed += not sample.ok
            # A failed turn still gets a reply in the history, so later turns keep their shape.
            history.append({"role": "assistant", "content": reply or "(no answer)"})

    async def worker(client: httpx.AsyncClient) -> None:
        while not stop.is_set():
            try:
                conversation = queue.get_nowait()
            except asyncio.QueueEmpty:
                return
            await converse(client, conversation)

    limits = httpx.Limits(max_connections=spec.concurrency, max_keepalive_connections=spec.concurrency)
    timeout = httpx.Timeout(spec.timeout_s, connect=min(10.0, spec.timeout_s))
    async with httpx.AsyncClient(timeout=timeout, limits=limits) as client:
        await asyncio.gather(*(worker(client) for _ in range(spec.concurrency)))
    return LoadResult(samples=samples, wall_s=time.perf_counter() - t0, stopped=stop.is_set())
