"""What only the in-thread client does; the contract it shares with the other clients is in
test_engine_client_contract.py."""

import asyncio
import threading

import pytest

from engine import AsyncLLMEngine, SamplingParams
from engine.clients.in_thread import InThreadEngineClient
from engine.clients.request_stream import EngineDeadError
from engine.config import EngineConfig


def _run(coro):
    return asyncio.run(asyncio.wait_for(coro, timeout=60))


def _engine_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "chassis-engine"]


def test_the_public_name_is_the_in_thread_client():
    assert AsyncLLMEngine is InThreadEngineClient


def test_the_core_runs_in_its_own_thread_until_shutdown(tiny_qwen3):
    async def main():
        engine = InThreadEngineClient(EngineConfig(model_dir=tiny_qwen3, device="cpu", dtype="float32"))
        await engine.start()
        try:
            seen = []
            async for out in engine.generate([7] * 20, SamplingParams(max_tokens=3, ignore_eos=True)):
                seen.append(out)
            assert seen[-1].finished and len(_engine_threads()) == 1
        finally:
            await engine.shutdown()
        assert not _engine_threads()

    _run(main())


def test_a_crash_in_the_loop_ends_streams_and_refuses_new_requests(tiny_qwen3):
    async def main():
        engine = InThreadEngineClient(EngineConfig(model_dir=tiny_qwen3, device="cpu", dtype="float32"))
        await engine.start()
        try:
            stream = engine.generate([5] * 8, SamplingParams(max_tokens=900, ignore_eos=True))
            await stream.__anext__()
            engine._commands.put("not a command")  # the loop raises on it, as on any bug in a step
            with pytest.raises(EngineDeadError, match="loop crashed: RuntimeError.*unknown command"):
                async for _ in stream:
                    pass
            assert not engine.ready
            with pytest.raises(EngineDeadError, match="unknown command"):
                engine.generate([5], SamplingParams())
        finally:
            await engine.shutdown()
        assert not _engine_threads()

    _run(main())
