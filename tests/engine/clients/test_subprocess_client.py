"""SubprocessEngineClient: the AsyncLLMEngine contract, with the engine core in a child process."""

from __future__ import annotations

import asyncio
import os

import psutil
import pytest

from engine import SamplingParams
from engine.clients.request_stream import EngineDeadError
from engine.clients.subprocess_client import SubprocessEngineClient
from engine.config import EngineConfig
from engine.kv.block_hash import hash_chain


def _run(coro):
    return asyncio.run(asyncio.wait_for(coro, timeout=90))


async def _started(model_dir, on_death=None, **kwargs) -> SubprocessEngineClient:
    config = EngineConfig(model_dir=model_dir, device="cpu", dtype="float32", **kwargs)
    engine = SubprocessEngineClient(config, on_death=on_death)
    assert not engine.ready
    await engine.start()
    assert engine.ready
    return engine


async def _until(condition, timeout: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition() and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.02)


def test_streams_deltas_that_add_up_from_a_child_process(tiny_qwen3):
    async def main():
        engine = await _started(tiny_qwen3)
        try:
            core = psutil.Process(engine.pid)
            assert engine.pid != os.getpid() and core.ppid() == os.getpid()
            params = SamplingParams(max_tokens=10, temperature=0.0, ignore_eos=True, logprobs=1)

            async def collect(prompt, rid):
                return [o async for o in engine.generate(prompt, params, request_id=rid)]

            results = await asyncio.gather(*(collect(f"x = {i} + " * (i + 1), f"r{i}") for i in range(4)))
            for i, outs in enumerate(results):
                last = outs[-1]
                assert last.request_id == f"r{i}" and last.finished and last.finish_reason == "length"
                assert not any(o.finished for o in outs[:-1])
                assert last.prompt_token_ids == engine.tokenizer.encode(f"x = {i} + " * (i + 1))
                assert sum((o.new_token_ids for o in outs), []) == last.token_ids
                assert "".join(o.new_text for o in outs) == last.text
                assert len(sum((o.new_logprobs for o in outs), [])) == 10
                m = last.metrics
                assert m.arrival_time <= m.first_scheduled_time <= m.first_token_time <= m.finished_time
            await _until(lambda: engine.stats().num_running == 0)
            stats = engine.stats()
            assert stats.generation_tokens == 40 and stats.num_running == 0 and stats.num_blocks_used == 0
            assert engine.max_model_len == 1024
        finally:
            await engine.shutdown()
        assert not core.is_running() or core.status() == psutil.STATUS_ZOMBIE

    _run(main())


def test_bad_prompts_fail_in_the_caller_and_the_core_keeps_serving(tiny_qwen3):
    async def main():
        engine = await _started(tiny_qwen3, max_model_len=64)
        try:
            params = SamplingParams(max_tokens=2)
            with pytest.raises(ValueError, match="outside the vocabulary"):
                engine.generate([1, 10**9], params)
            with pytest.raises(ValueError, match="prompt is empty"):
                engine.generate([], params)
            with pytest.raises(ValueError, match="max_model_len=64"):
                engine.generate([5] * 64, params)
            with pytest.raises(ValueError, match="SamplingParams"):
                engine.generate([5], {"max_tokens": 2})
            outs = [o async for o in engine.generate([5, 6, 7], params, request_id="fine")]
            assert outs[-1].finished and len(outs[-1].token_ids) == 2
        finally:
            await engine.shutdown()

    _run(main())


def test_closing_the_iterator_aborts_and_frees_blocks(tiny_qwen3):
    async def main():
        engine = await _started(tiny_qwen3)
        try:
            stream = engine.generate([5] * 40, SamplingParams(max_tokens=500, ignore_eos=True))
            async for out in stream:
                if len(out.token_ids) >= 3:
                    break
            assert engine.stats().num_blocks_used > 0
            await stream.aclose()
            await _until(lambda: engine.stats().num_blocks_used == 0)
            stats = engine.stats()
            assert stats.num_blocks_used == 0 and stats.num_running == 0
        finally:
            await engine.shutdown()

    _run(main())


def test_kv_event_mirror_numbers_the_core_events(tiny_qwen3):
    async def main():
        engine = await _started(tiny_qwen3, block_size=16)
        try:
            prompt = list(range(100, 150))  # three full blocks
            async for _ in engine.generate(prompt, SamplingParams(max_tokens=1), cache_salt="tenant"):
                pass
            await _until(lambda: engine.kv_events.last_seq >= 3)
            events = engine.kv_events.events_since(0)
            assert [e["seq"] for e in events] == list(range(1, engine.kv_events.last_seq + 1))
            stored = [h for e in events if e["type"] == "stored" for h in e["hashes"]]
            expected = [h.hex() for h in hash_chain(prompt, 16, b"tenant")]
            assert stored[:3] == expected
            assert set(expected) <= set(engine.kv_events.snapshot()[1])
        finally:
            await engine.shutdown()

    _run(main())


def test_a_killed_core_fails_open_streams_and_reports_why(tiny_qwen3):
    async def main():
        deaths: list[str] = []
        engine = await _started(tiny_qwen3, on_death=deaths.append)
        try:
            stream = engine.generate([5] * 8, SamplingParams(max_tokens=900, ignore_eos=True))
            await stream.__anext__()
            os.kill(engine.pid, 9)
            with pytest.raises(EngineDeadError, match="SIGKILL"):
                async for _ in stream:
                    pass
            assert deaths == [f"the engine core process (pid {engine.pid}) was killed by SIGKILL"]
            assert not engine.ready
            with pytest.raises(EngineDeadError, match="SIGKILL"):
                engine.generate([5], SamplingParams())
        finally:
            await engine.shutdown()

    _run(main())


def test_a_core_that_cannot_load_raises_its_error(tiny_qwen3):
    async def main():
        config = EngineConfig(model_dir=tiny_qwen3, device="cpu", max_model_len=10**6)
        engine = SubprocessEngineClient(config)
        with pytest.raises(ValueError, match="exceeds the model's max_position_embeddings"):
            await engine.start()
        assert not engine.ready
        assert (
            not psutil.pid_exists(engine.pid) or psutil.Process(engine.pid).status() == psutil.STATUS_ZOMBIE
        )

    _run(main())


def test_a_crash_in_the_core_loop_reaches_streams_with_its_reason(tiny_qwen3):
    async def main():
        deaths: list[str] = []
        engine = await _started(tiny_qwen3, on_death=deaths.append)
        try:
            stream = engine.generate([5] * 8, SamplingParams(max_tokens=900, ignore_eos=True))
            await stream.__anext__()
            engine._send("not a command")  # the core's loop raises on it, like any bug in a step would
            with pytest.raises(EngineDeadError, match="loop crashed: RuntimeError: unknown command"):
                async for _ in stream:
                    pass
            assert len(deaths) == 1 and "unknown command from the front end" in deaths[0]
        finally:
            await engine.shutdown()
        assert not psutil.pid_exists(engine.pid)  # it exited on its own; shutdown reaped it

    _run(main())
