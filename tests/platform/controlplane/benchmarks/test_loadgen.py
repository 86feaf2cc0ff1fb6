"""The load generator against a real ``chassis serve`` replica on loopback (no Django)."""

import asyncio
import threading

import pytest
from controlplane.benchmarks.loadgen import LoadSpec, Progress, chart_samples, run_load, summarize
from controlplane.benchmarks.prompts import build_conversations, request_count

from tests.support.ports import free_port

MODEL = "tiny"


def spec(**overrides) -> LoadSpec:
    values = dict(workload="chat-short", requests=6, concurrency=3, max_tokens=5, seed=1, model=MODEL)
    return LoadSpec(**{**values, **overrides})


def test_counts_ttft_and_itl_are_recorded(engine_replica):
    progress = Progress(total=6)
    result = asyncio.run(run_load([engine_replica.url], spec(), progress=progress))
    assert len(result.samples) == 6 and progress.completed == 6 and progress.failed == 0
    assert sorted(s.index for s in result.samples) == list(range(6))
    for sample in result.samples:
        assert sample.ok, sample.error
        assert 0 < sample.ttft_s <= sample.latency_s
        assert sample.output_tokens == 5  # ignore_eos: every request generates max_tokens
        assert all(gap > 0 for gap in sample.itl_s)
    # A gap per streamed chunk after the first (the detokenizer may merge tokens into one chunk).
    assert sum(len(s.itl_s) for s in result.samples) >= len(result.samples)
    summary = summarize(result)
    assert summary["requests_ok"] == 6 and summary["requests_failed"] == 0
    assert 0 < summary["ttft_p50_ms"] <= summary["ttft_p90_ms"] <= summary["ttft_p99_ms"]
    assert 0 < summary["itl_p50_ms"] <= summary["itl_p99_ms"]
    assert summary["output_tokens"] == 30 and summary["output_tokens_per_s"] > 0
    assert summary["requests_per_s"] > 0
    rows = chart_samples(result.samples, limit=4)
    assert len(rows) == 4 and all(row[3] and row[1] > 0 for row in rows)


def test_multi_turn_sends_every_turn_in_order(engine_replica):
    result = asyncio.run(
        run_load([engine_replica.url], spec(workload="multi-turn", requests=5, concurrency=2))
    )
    assert len(result.samples) == 5 and all(s.ok for s in result.samples)
    turns = sorted((s.conversation, s.turn) for s in result.samples)
    assert turns == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1)]
    first, second = (next(s for s in result.samples if (s.conversation, s.turn) == (0, t)) for t in (0, 1))
    assert second.start_s >= first.start_s + first.latency_s * 0.99  # a turn waits for the reply before it


def test_prompts_are_seeded_and_sized():
    for workload in ("chat-short", "shared-prefix", "multi-turn"):
        a = build_conversations(workload, 10, seed=7)
        assert request_count(a) == 10
        assert [(c.system, c.user_turns) for c in a] == [
            (c.system, c.user_turns) for c in build_conversations(workload, 10, seed=7)
        ]
        assert [c.user_turns for c in a] != [c.user_turns for c in build_conversations(workload, 10, seed=8)]
    shared = build_conversations("shared-prefix", 40, seed=0)
    assert 1 < len({c.system for c in shared}) <= 4  # a few tenants, each prompt reused
    with pytest.raises(ValueError, match="unknown workload"):
        build_conversations("nope", 1, 0)


def test_sweep_prompts_have_their_length_and_differ_between_points():
    from controlplane.benchmarks.prompts import fixed_length_conversations

    point = fixed_length_conversations(4, 64, seed=1, salt="c1-o4")
    assert len(point) == 4 and all(len(c.user_turns[0].split()) == 64 for c in point)
    assert len({c.user_turns[0] for c in point}) == 4
    again = fixed_length_conversations(4, 64, seed=1, salt="c1-o4")
    assert [c.user_turns for c in again] == [c.user_turns for c in point]  # same seed, same prompts
    other = fixed_length_conversations(4, 64, seed=1, salt="c2-o4")
    assert not {c.user_turns[0] for c in other} & {c.user_turns[0] for c in point}
    with pytest.raises(ValueError, match="at least 1"):
        fixed_length_conversations(4, 0, seed=1)


def test_wrong_url_gives_failed_requests_with_a_reason():
    dead = f"http://127.0.0.1:{free_port()}"
    result = asyncio.run(run_load([dead], spec(requests=3)))
    assert len(result.samples) == 3 and not any(s.ok for s in result.samples)
    assert all(s.error.startswith("ConnectError") for s in result.samples), result.samples[0].error
    summary = summarize(result)
    assert summary["requests_failed"] == 3 and summary["ttft_p50_ms"] is None
    assert next(iter(summary["errors"])).startswith("ConnectError")


def test_wrong_model_gives_the_http_error(engine_replica):
    result = asyncio.run(run_load([engine_replica.url], spec(requests=2, model="no-such-model")))
    assert not any(s.ok for s in result.samples)
    assert result.samples[0].error.startswith("HTTP 404"), result.samples[0].error


def test_stop_event_ends_the_run_between_requests(engine_replica):
    stop = threading.Event()
    stop.set()
    result = asyncio.run(run_load([engine_replica.url], spec(requests=4), stop=stop))
    assert result.samples == [] and result.stopped
