"""What only the offline ``LLM``'s client does: its batch API and its async API share one core, one
admission and one drive loop. The contract it shares with the other clients is in
test_engine_client_contract.py."""

import asyncio

import pytest

from engine import LLM, SamplingParams
from engine.clients.request_stream import EngineDeadError

GREEDY = SamplingParams(max_tokens=4, temperature=0.0, ignore_eos=True)


def _run(coro):
    return asyncio.run(asyncio.wait_for(coro, timeout=60))


def test_a_bad_prompt_in_a_batch_admits_none_of_it(tiny_qwen3):
    llm = LLM(tiny_qwen3, device="cpu", dtype="float32")
    with pytest.raises(ValueError, match="outside the vocabulary"):
        llm.generate(["fine", [10**9]], GREEDY)
    assert llm.stats().prompt_tokens == 0 and not llm.engine.has_unfinished()
    (out,) = llm.generate(["fine"], GREEDY)
    assert out.finish_reason == "length" and len(out.token_ids) == 4


def test_the_batch_api_also_runs_the_open_streams(tiny_qwen3):
    async def main():
        llm = LLM(tiny_qwen3, device="cpu", dtype="float32")
        await llm.client.start()
        try:
            stream = llm.client.generate("streamed", GREEDY, request_id="s")
            (batch,) = llm.generate(["batched"], GREEDY)  # drives the core until nothing is unfinished
            assert batch.request_id.startswith("llm-") and len(batch.token_ids) == 4
            assert not llm.engine.has_unfinished()
            outs = [o async for o in stream]  # everything was delivered already
            assert outs[-1].finished and outs[-1].token_ids == llm.generate(["streamed"], GREEDY)[0].token_ids
        finally:
            await llm.client.shutdown()

    _run(main())


def test_a_crash_in_the_loop_ends_streams_and_refuses_new_requests(tiny_qwen3):
    async def main():
        client = LLM(tiny_qwen3, device="cpu", dtype="float32").client
        await client.start()
        try:
            stream = client.generate([5] * 8, SamplingParams(max_tokens=900, ignore_eos=True))
            await stream.__anext__()
            client._send("not a command")  # the loop raises on it, as on any bug in a step
            with pytest.raises(EngineDeadError, match="loop crashed: RuntimeError.*unknown command"):
                async for _ in stream:
                    pass
            assert not client.ready
        finally:
            await client.shutdown()

    _run(main())


def test_the_batch_api_works_after_the_async_api_s_event_loop_has_closed(tiny_qwen3):
    llm = LLM(tiny_qwen3, device="cpu", dtype="float32")

    async def stream():
        await llm.client.start()
        return [o async for o in llm.client.generate("again", GREEDY)]

    streamed = asyncio.run(stream())  # left without shutdown(): the loop closes under the client
    (batch,) = llm.generate(["again"], GREEDY)
    assert batch.token_ids == streamed[-1].token_ids
