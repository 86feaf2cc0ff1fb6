"""AsyncLLMEngine: the contract the HTTP server builds on."""

import asyncio
import threading

import pytest

from engine import AsyncLLMEngine, SamplingParams
from engine.config import EngineConfig


def _run(coro):
    return asyncio.run(asyncio.wait_for(coro, timeout=60))


async def _started(model_dir, **kwargs):
    engine = AsyncLLMEngine(EngineConfig(model_dir=model_dir, device="cpu", dtype="float32", **kwargs))
    assert not engine.ready
    await engine.start()
    assert engine.ready
    return engine


def test_streams_deltas_that_add_up(tiny_qwen3):
    async def main():
        engine = await _started(tiny_qwen3)
        try:
            params = SamplingParams(max_tokens=10, temperature=0.0, ignore_eos=True, logprobs=1)

            async def collect(prompt, rid):
                outs = [o async for o in engine.generate(prompt, params, request_id=rid)]
                return outs

            results = await asyncio.gather(*(collect(f"x = {i} + " * (i + 1), f"r{i}") for i in range(4)))
            for i, outs in enumerate(results):
                last = outs[-1]
                assert last.request_id == f"r{i}" and last.finished and last.finish_reason == "length"
                assert not any(o.finished for o in outs[:-1])
                assert sum((o.new_token_ids for o in outs), []) == last.token_ids
                assert "".join(o.new_text for o in outs) == last.text
                assert len(sum((o.new_logprobs for o in outs), [])) == 10
                m = last.metrics
                assert m.arrival_time <= m.first_scheduled_time <= m.first_token_time <= m.finished_time
            stats = engine.stats()
            assert stats.generation_tokens == 40 and stats.num_running == 0 and stats.num_blocks_used == 0
            assert engine.tokenizer.encode_chat([{"role": "user", "content": "hi"}])
            assert engine.max_model_len == 1024 and engine.config.block_size == 16
        finally:
            await engine.shutdown()

    _run(main())


def test_closing_the_iterator_aborts_and_frees_blocks(tiny_qwen3):
    async def main():
        engine = await _started(tiny_qwen3)
        try:
            stream = engine.generate(
                [5] * 40, SamplingParams(max_tokens=500, ignore_eos=True), request_id="long"
            )
            async for out in stream:
                if len(out.token_ids) >= 3:
                    break
            assert engine.stats().num_blocks_used > 0
            await stream.aclose()
            for _ in range(100):
                if engine.stats().num_blocks_used == 0:
                    break
                await asyncio.sleep(0.02)
            stats = engine.stats()
            assert stats.num_blocks_used == 0 and stats.num_running == 0
        finally:
            await engine.shutdown()

    _run(main())


def test_dropping_an_unread_stream_aborts(tiny_qwen3):
    async def main():
        engine = await _started(tiny_qwen3)
        try:
            stream = engine.generate(
                "hello", SamplingParams(max_tokens=500, ignore_eos=True), request_id="dropped"
            )
            await asyncio.sleep(0.05)
            del stream
            for _ in range(100):
                if engine.stats().num_running == 0 and engine.stats().num_waiting == 0:
                    break
                await asyncio.sleep(0.02)
            assert engine.stats().num_running == 0 and engine.stats().num_blocks_used == 0
            assert engine.stats().generation_tokens < 500
        finally:
            await engine.shutdown()

    _run(main())


def test_cancelled_consumer_task_aborts(tiny_qwen3):
    async def main():
        engine = await _started(tiny_qwen3)
        try:
            seen = asyncio.Event()

            async def consume():
                async for _ in engine.generate("hello", SamplingParams(max_tokens=500, ignore_eos=True)):
                    seen.set()

            task = asyncio.create_task(consume())
            await seen.wait()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            for _ in range(100):
                if engine.stats().num_running == 0 and engine.stats().num_blocks_used == 0:
                    break
                await asyncio.sleep(0.02)
            assert engine.stats().num_running == 0 and engine.stats().num_blocks_used == 0
        finally:
            await engine.shutdown()

    _run(main())


def test_explicit_abort_ends_the_stream_with_abort(tiny_qwen3):
    async def main():
        engine = await _started(tiny_qwen3)
        try:
            outs = []
            async for out in engine.generate(
                "abc", SamplingParams(max_tokens=500, ignore_eos=True), request_id="a1"
            ):
                outs.append(out)
                if len(outs) == 2:
                    await engine.abort("a1")
            assert outs[-1].finished and outs[-1].finish_reason == "abort"
            assert len(outs[-1].token_ids) < 500
        finally:
            await engine.shutdown()

    _run(main())


def test_bad_requests_fail_before_scheduling(tiny_qwen3):
    async def main():
        engine = await _started(tiny_qwen3, max_model_len=64)
        try:
            with pytest.raises(ValueError, match="max_model_len=64"):
                engine.generate([5] * 64, SamplingParams())
            with pytest.raises(ValueError, match="outside the vocabulary"):
                engine.generate([100000], SamplingParams())
            with pytest.raises(ValueError, match="empty"):
                engine.generate([], SamplingParams())
            stream = engine.generate("ok", SamplingParams(max_tokens=2), request_id="dup")
            with pytest.raises(ValueError, match="already in use"):
                engine.generate("ok", SamplingParams(), request_id="dup")
            assert [o async for o in stream][-1].finished
            assert engine.stats().num_waiting == 0
        finally:
            await engine.shutdown()

    _run(main())


def test_engine_loop_runs_off_the_event_loop_and_emits_kv_events(tiny_qwen3):
    async def main():
        engine = await _started(tiny_qwen3)
        try:
            ticks = 0

            async def ticker():
                nonlocal ticks
                while True:
                    ticks += 1
                    await asyncio.sleep(0.001)

            t = asyncio.create_task(ticker())
            outs = [
                o async for o in engine.generate([7] * 50, SamplingParams(max_tokens=40, ignore_eos=True))
            ]
            t.cancel()
            assert outs[-1].finished and ticks > 5
            assert any(th.name == "chassis-engine" for th in threading.enumerate())
            last_seq, hashes = engine.kv_events.snapshot()
            assert last_seq >= 1 and len(hashes) == (50 + 40 - 1) // 16
            assert engine.kv_events.events_since(0)[0]["type"] == "stored"
        finally:
            await engine.shutdown()
        assert not any(th.name == "chassis-engine" for th in threading.enumerate())

    _run(main())
