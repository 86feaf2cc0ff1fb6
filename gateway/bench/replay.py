"""Replay a workload against a gateway with streaming chat requests, measuring what clients see."""

from __future__ import annotations

import asyncio
import json
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import httpx
from prometheus_client.parser import text_string_to_metric_families

from gateway.bench.workload import Session
from gateway.proxy import REPLICA_HEADER
from measurement import StreamTimer, atime_stream


@dataclass
class RequestResult:
    session_id: str
    kind: str
    replica: str | None
    ok: bool
    ttft_s: float | None = None
    latency_s: float = 0.0
    error: str | None = None
    prompt_tokens: int = 0
    cached_tokens: int = 0
    streamed: bool = False  # at least one byte of body came back
    itl_s: list[float] = field(default_factory=list)  # gaps between consecutive content chunks
    turn: int = 0  # which of its session's turns


async def _one_request(
    client: httpx.AsyncClient,
    url: str,
    model: str,
    session: Session,
    messages: list[dict],
    max_tokens: int,
    extra: dict | None = None,
) -> tuple[RequestResult, str]:
    body = {
        **(extra or {}),
        "model": model,
        "messages": messages,
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
        "user": session.session_id,
    }
    if session.cache_salt is not None:
        body["cache_salt"] = session.cache_salt
    result = RequestResult(session.session_id, session.kind, None, ok=False)
    timer = StreamTimer()
    try:
        async with client.stream(
            "POST", f"{url}/v1/chat/completions", json=body, headers={"x-session-id": session.session_id}
        ) as response:
            result.replica = response.headers.get(REPLICA_HEADER)
            if response.status_code != 200:
                result.error = f"HTTP {response.status_code}: {(await response.aread())[:200]!r}"
                return result, ""
            await atime_stream(response.aiter_lines(), timer)
    except (httpx.HTTPError, json.JSONDecodeError) as exc:
        result.error = repr(exc)
    record = timer.finish()
    result.streamed = record.lines > 0
    result.latency_s = record.e2e_s
    result.itl_s = record.itl_s
    result.prompt_tokens, result.cached_tokens = record.prompt_tokens, record.cached_tokens
    # A reply whose first token is end-of-sequence carries no content: its finish chunk is that token.
    result.ttft_s = record.ttft_s if record.ttft_s is not None else record.finish_s
    if result.error is None and record.error is not None:
        result.error = f"error event: {record.error}"
    elif result.error is None and result.ttft_s is None:
        result.error = "stream ended without a token"
    result.ok = result.error is None and result.ttft_s is not None
    return result, record.text


def assistant(text: str) -> dict:
    return {"role": "assistant", "content": text}


async def replay(
    url: str,
    model: str,
    sessions: list[Session],
    concurrency: int = 8,
    max_tokens: int = 8,
    progress: Callable[[int], None] | None = None,
    timeout_s: float = 120.0,
    extra: dict | None = None,
    open_sessions: int | None = None,
) -> list[RequestResult]:
    """Closed loop at ``concurrency``: every turn of every session, a session's turns in order,
    interleaved with others; start and think times are ignored (for tests that need a fixed load).
    ``open_sessions``: sessions are opened in order, at most this many at once, each next turn
    queued behind the other open sessions' (that many users taking turns, as in a trace replayed in
    order); None: every session is open from the start. ``extra``: more fields of every body."""
    waiting = deque(sessions)  # not opened yet
    pending: deque[tuple[Session, int, list[dict]]] = deque()
    results: list[RequestResult] = []
    active = 0
    opened = 0
    limit = open_sessions or len(sessions)

    def open_more() -> None:
        nonlocal opened
        while waiting and opened < limit:
            session = waiting.popleft()
            opened += 1
            pending.append((session, 0, [{"role": "system", "content": session.system}]))

    open_more()

    async def worker(client: httpx.AsyncClient) -> None:
        nonlocal active, opened
        while True:
            if not pending:
                if active == 0:
                    return
                await asyncio.sleep(0.01)
                continue
            session, turn, history = pending.popleft()
            active += 1
            try:
                messages = history + [{"role": "user", "content": session.turns[turn].user_text}]
                result, reply = await _one_request(client, url, model, session, messages, max_tokens, extra)
                result.turn = turn
                results.append(result)
                if progress:
                    progress(len(results))
                if turn + 1 < len(session.turns) and result.ok:
                    answer = session.turns[turn].reply
                    pending.append(
                        (session, turn + 1, messages + [assistant(reply if answer is None else answer)])
                    )
                else:
                    opened -= 1
                    open_more()
            finally:
                active -= 1

    limits = httpx.Limits(max_connections=concurrency * 2)
    async with httpx.AsyncClient(timeout=httpx.Timeout(timeout_s, connect=5.0), limits=limits) as client:
        await asyncio.gather(*(worker(client) for _ in range(concurrency)))
    return results


async def replay_open_loop(
    url: str,
    model: str,
    sessions: list[Session],
    max_tokens: int = 8,
    progress: Callable[[int], None] | None = None,
    timeout_s: float = 120.0,
    extra: dict | None = None,
) -> list[RequestResult]:
    """Start every session at its own ``start_s`` whatever came before (open loop: the offered load is
    the same under every policy); a conversation sends its next turn ``think_s`` after its reply.
    ``extra``: more fields of every request body (``ignore_eos``, say)."""
    results: list[RequestResult] = []
    t0 = time.perf_counter()

    async def run_session(client: httpx.AsyncClient, session: Session) -> None:
        await asyncio.sleep(max(0.0, session.start_s - (time.perf_counter() - t0)))
        history = [{"role": "system", "content": session.system}]
        for turn in session.turns:
            if turn.think_s:
                await asyncio.sleep(turn.think_s)
            messages = history + [{"role": "user", "content": turn.user_text}]
            result, reply = await _one_request(client, url, model, session, messages, max_tokens, extra)
            results.append(result)
            if progress:
                progress(len(results))
            if not result.ok:
                return
            history = messages + [{"role": "assistant", "content": reply}]

    limits = httpx.Limits(max_connections=None, max_keepalive_connections=64)
    async with httpx.AsyncClient(timeout=httpx.Timeout(timeout_s, connect=5.0), limits=limits) as client:
        await asyncio.gather(*(run_session(client, s) for s in sessions))
    return results


def scrape_prefix_cache(replica_urls: list[str]) -> dict[str, tuple[float, float]]:
    """(hits, queries) in tokens per replica, from each replica's own Prometheus counters."""
    out = {}
    for url in replica_urls:
        hits = queries = 0.0
        text = httpx.get(f"{url}/metrics", timeout=5.0).text
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name in ("vllm:prefix_cache_hits_total", "vllm:prefix_cache_hits"):
                    hits += sample.value
                elif sample.name in ("vllm:prefix_cache_queries_total", "vllm:prefix_cache_queries"):
                    queries += sample.value
        out[url] = (hits, queries)
    return out
