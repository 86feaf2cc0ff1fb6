"""The ``EngineClient`` contract, run against every implementation: the in-thread client, the
subprocess client and the offline ``LLM`` (through ``LLM.client``), on a tiny CPU checkpoint.

One started client per kind serves the module (loading a model is the slow part), on one event loop
that every test runs on; each test leaves it with no request open. Tests wait on the streams' own
outputs, never on the clock: commands reach the core in the order they were sent, so once a request
sent after an abort has finished, the abort has been applied.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from engine import LLM, EngineClient, SamplingParams
from engine.clients.in_thread import InThreadEngineClient
from engine.clients.request_stream import EngineDeadError
from engine.clients.subprocess_client import SubprocessEngineClient
from engine.config import EngineConfig
from engine.kv.block_hash import hash_chain

KINDS = ["in_thread", "subprocess", "llm"]
MAX_MODEL_LEN = 1024
LONG = 900  # max_tokens of a request that must still run when the test acts on it
BLOCK_SIZE = 16
TIMEOUT_S = 120  # a hung test fails instead of hanging the suite
GREEDY = SamplingParams(max_tokens=8, temperature=0.0, ignore_eos=True, logprobs=1)
PROMPTS = ["def add(a, b):", [5, 6, 7, 8, 9], "x = 1 + " * 6, "hello"]


CONFIG = {"device": "cpu", "dtype": "float32", "max_model_len": MAX_MODEL_LEN, "block_size": BLOCK_SIZE}


def make_client(kind: str, model_dir) -> EngineClient:
    if kind == "llm":
        return LLM(model_dir, **CONFIG).client
    engine_config = EngineConfig(model_dir=model_dir, **CONFIG)
    if kind == "in_thread":
        return InThreadEngineClient(engine_config)
    return SubprocessEngineClient(engine_config)


@pytest.fixture(scope="module")
def runner() -> Iterator[asyncio.Runner]:
    with asyncio.Runner() as runner:
        yield runner


def run(runner: asyncio.Runner, coro):
    return runner.run(asyncio.wait_for(coro, TIMEOUT_S))


@pytest.fixture(scope="module", params=KINDS)
def client(request, runner, tiny_qwen3) -> Iterator[EngineClient]:
    client = make_client(request.param, tiny_qwen3)
    run(runner, client.start())
    yield client
    run(runner, client.shutdown())


@pytest.fixture(scope="module")
def expected(tiny_qwen3) -> list:
    """The reference: ``LLM.generate``, the synchronous batch API, on the same checkpoint."""
    llm = LLM(tiny_qwen3, **CONFIG)
    return [(o.token_ids, o.text) for o in llm.generate(PROMPTS, GREEDY)]


async def collect(client: EngineClient, prompt, params, request_id=None, cache_salt=None) -> list:
    return [o async for o in client.generate(prompt, params, request_id=request_id, cache_salt=cache_salt)]


def test_is_an_engine_client_once_started(client):
    assert isinstance(client, EngineClient)
    assert client.ready
    assert isinstance(client.pid, int)
    assert client.max_model_len == MAX_MODEL_LEN
    assert client.tokenizer.encode_chat([{"role": "user", "content": "hi"}])


def test_greedy_outputs_equal_the_offline_batch_and_deltas_add_up(client, runner, expected):
    async def main():
        return await asyncio.gather(
            *(collect(client, p, GREEDY, f"greedy-{i}") for i, p in enumerate(PROMPTS))
        )

    before = client.stats()
    results = run(runner, main())
    for i, outs in enumerate(results):
        last = outs[-1]
        assert (last.token_ids, last.text) == expected[i]
        assert last.request_id == f"greedy-{i}" and last.finished and last.finish_reason == "length"
        assert not any(o.finished for o in outs[:-1])
        assert sum((o.new_token_ids for o in outs), []) == last.token_ids
        assert "".join(o.new_text for o in outs) == last.text
        assert len(sum((o.new_logprobs for o in outs), [])) == GREEDY.max_tokens
        m = last.metrics
        assert m.arrival_time <= m.first_scheduled_time <= m.first_token_time <= m.finished_time
    stats = client.stats()  # as of the turn that finished the last request, at the latest
    prompt_tokens = sum(len(outs[-1].prompt_token_ids) for outs in results)
    assert stats.prompt_tokens - before.prompt_tokens == prompt_tokens
    assert stats.generation_tokens - before.generation_tokens == len(PROMPTS) * GREEDY.max_tokens
    assert stats.num_running == 0 and stats.num_waiting == 0 and stats.num_blocks_used == 0


def test_abort_ends_the_stream_and_frees_the_request(client, runner):
    async def main():
        outs = []
        async for out in client.generate([5] * 40, SamplingParams(max_tokens=LONG, ignore_eos=True), "ab"):
            outs.append(out)
            if len(outs) == 2:
                assert client.stats().num_blocks_used > 0
                await client.abort("ab")
                await client.abort("no-such-request")  # harmless
        return outs

    outs = run(runner, main())
    assert outs[-1].finished and outs[-1].finish_reason == "abort" and len(outs[-1].token_ids) < LONG
    stats = client.stats()
    assert stats.num_running == 0 and stats.num_blocks_used == 0


@pytest.mark.parametrize("how", ["aclose", "cancel"])
def test_leaving_a_stream_early_aborts_its_request(client, runner, how):
    async def main():
        before = client.stats().generation_tokens
        stream = client.generate([7] * 40, SamplingParams(max_tokens=LONG, ignore_eos=True))
        if how == "aclose":
            async for out in stream:
                if len(out.token_ids) >= 2:
                    break
            await stream.aclose()
        else:
            first = asyncio.Event()

            async def consume():
                async for _ in stream:
                    first.set()

            task = asyncio.create_task(consume())
            await first.wait()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        # Sent after the abort, so finished after it was applied.
        await collect(client, [3, 4], SamplingParams(max_tokens=1))
        return client.stats().generation_tokens - before

    generated = run(runner, main())
    stats = client.stats()
    assert generated < LONG
    assert stats.num_running == 0 and stats.num_waiting == 0 and stats.num_blocks_used == 0


def test_a_request_id_in_use_is_refused_until_its_stream_ends(client, runner):
    async def main():
        stream = client.generate("ok", SamplingParams(max_tokens=2), request_id="dup")
        with pytest.raises(ValueError, match="already in use"):
            client.generate("ok", SamplingParams(max_tokens=2), request_id="dup")
        first = [o async for o in stream]
        again = await collect(client, "ok", SamplingParams(max_tokens=2), request_id="dup")
        return first, again

    first, again = run(runner, main())
    assert first[-1].finished and again[-1].finished and len(first) == 2


def test_a_bad_prompt_is_a_value_error_at_admission(client, runner):
    params = SamplingParams(max_tokens=2)
    with pytest.raises(ValueError, match=f"max_model_len={MAX_MODEL_LEN}"):
        client.generate([5] * MAX_MODEL_LEN, params)
    with pytest.raises(ValueError, match="outside the vocabulary"):
        client.generate([1, 10**9], params)
    with pytest.raises(ValueError, match="prompt is empty"):
        client.generate([], params)
    with pytest.raises(ValueError, match="string or a list of token ids"):
        client.generate({"text": "hi"}, params)
    with pytest.raises(ValueError, match="SamplingParams"):
        client.generate([5], {"max_tokens": 2})
    outs = run(runner, collect(client, [5, 6, 7], params, request_id="fine"))  # still serving
    assert outs[-1].finished and len(outs[-1].token_ids) == 2
    assert client.stats().num_waiting == 0


def test_kv_events_name_the_prompt_blocks(client, runner):
    prompt = list(range(100, 150))  # three full blocks
    run(runner, collect(client, prompt, SamplingParams(max_tokens=1), cache_salt="tenant"))
    events = client.kv_events.events_since(0)
    assert [e["seq"] for e in events] == list(range(1, client.kv_events.last_seq + 1))
    stored = {h for e in events if e["type"] == "stored" for h in e["hashes"]}
    expected = [h.hex() for h in hash_chain(prompt, BLOCK_SIZE, b"tenant")]
    assert len(expected) == 3 and set(expected) <= stored
    assert set(expected) <= set(client.kv_events.snapshot()[1])


@pytest.mark.parametrize("kind", KINDS)
def test_shutdown_ends_open_streams_with_engine_dead_error(kind, tiny_qwen3):
    async def main():
        client = make_client(kind, tiny_qwen3)
        assert not client.ready
        with pytest.raises(EngineDeadError, match="not started"):
            client.generate("hi", SamplingParams())
        await client.start()
        stream = client.generate([5] * 8, SamplingParams(max_tokens=LONG, ignore_eos=True))
        await stream.__anext__()
        await client.shutdown()
        assert not client.ready
        with pytest.raises(EngineDeadError, match="shut down"):
            async for _ in stream:
                pass
        with pytest.raises(EngineDeadError, match="shut down"):
            client.generate("hi", SamplingParams())

    asyncio.run(asyncio.wait_for(main(), TIMEOUT_S))
