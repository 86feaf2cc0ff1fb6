"""What only the subprocess client does (a child process, and what happens when it dies or cannot
load); the contract it shares with the other clients is in test_engine_client_contract.py."""

from __future__ import annotations

import asyncio
import os

import psutil
import pytest

from engine import SamplingParams
from engine.clients.request_stream import EngineDeadError
from engine.clients.subprocess_client import SubprocessEngineClient
from engine.config import EngineConfig


def _run(coro):
    return asyncio.run(asyncio.wait_for(coro, timeout=90))


async def _started(model_dir, on_death=None, **kwargs) -> SubprocessEngineClient:
    config = EngineConfig(model_dir=model_dir, device="cpu", dtype="float32", **kwargs)
    engine = SubprocessEngineClient(config, on_death=on_death)
    assert not engine.ready
    await engine.start()
    assert engine.ready
    return engine


def test_the_core_is_a_child_process_that_ends_at_shutdown(tiny_qwen3):
    async def main():
        engine = await _started(tiny_qwen3)
        try:
            core = psutil.Process(engine.pid)
            assert engine.pid != os.getpid() and core.ppid() == os.getpid()
            prompt = "x = 1 + 2"
            outs = [o async for o in engine.generate(prompt, SamplingParams(max_tokens=3, ignore_eos=True))]
            # The front end tokenized the prompt and rebuilt full outputs from the core's deltas.
            assert outs[-1].prompt_token_ids == engine.tokenizer.encode(prompt)
            assert outs[-1].token_ids == sum((o.new_token_ids for o in outs), [])
        finally:
            await engine.shutdown()
        assert not core.is_running() or core.status() == psutil.STATUS_ZOMBIE

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
