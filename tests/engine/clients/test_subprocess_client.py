"""What only the subprocess client does (a child process, and what happens when it dies or cannot
load); the contract it shares with the other clients is in test_engine_client_contract.py."""

from __future__ import annotations

import asyncio
import os
import re
import signal

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


def _kill(engine: SubprocessEngineClient) -> None:
    os.kill(engine.pid, signal.SIGKILL)


def _crash_its_loop(engine: SubprocessEngineClient) -> None:
    engine._send("not a command")  # the core's loop raises on it, like any bug in a step would


@pytest.mark.parametrize(
    "end_the_core, reason",
    [
        (_kill, r"the engine core process \(pid \d+\) was killed by SIGKILL"),
        (
            _crash_its_loop,
            "the engine core's loop crashed: RuntimeError: unknown command from the front end: 'not a command'",
        ),
    ],
    ids=["sigkill", "loop-crash"],
)
def test_a_dead_core_fails_open_streams_and_reports_why(tiny_qwen3, end_the_core, reason):
    async def main():
        deaths: list[str] = []
        engine = await _started(tiny_qwen3, on_death=deaths.append)
        try:
            stream = engine.generate([5] * 8, SamplingParams(max_tokens=900, ignore_eos=True))
            await stream.__anext__()
            end_the_core(engine)
            with pytest.raises(EngineDeadError, match=f"the engine core died: {reason}"):
                async for _ in stream:
                    pass
            assert len(deaths) == 1 and re.fullmatch(reason, deaths[0])
            assert not engine.ready
            with pytest.raises(EngineDeadError, match=f"not running \\({reason}\\)"):
                engine.generate([5], SamplingParams())
        finally:
            await engine.shutdown()
        assert not psutil.pid_exists(engine.pid)  # exited, and reaped by shutdown

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
