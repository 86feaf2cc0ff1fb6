"""Async scheduling (step N+1 launched before step N's samples are read) gives exactly the outputs
of the synchronous engine: greedy and seeded sampling, stop strings, stop ids and EOS, max_tokens,
penalties and logprobs (which fall back to reading first), preemption, abort, and streaming.

On CPU the steps do not overlap in time, but the same code path runs: placeholders in the
scheduler, pending tokens fed from the previous step's device tensor, outputs one step late."""

import random
import time

import pytest

from engine import LLM, SamplingParams
from engine.config import EngineConfig
from engine.core.drive_loop import CommandQueue, drive
from engine.core.engine_core import EngineCore
from engine.core.messages import AbortRequest, AddRequest


def _prompts(n, seed=3, low=3, high=60):
    rng = random.Random(seed)
    return [[rng.randrange(3, 400) for _ in range(rng.randrange(low, high))] for _ in range(n)]


def _run(model, prompts, params, eager_graphs=False, **kwargs):
    results = {}
    for mode in (False, True):
        llm = LLM(model, device="cpu", dtype="float32", async_scheduling=mode, **kwargs)
        assert llm.engine.async_scheduling is mode
        if eager_graphs:
            llm.engine.runner.capture_decode_graphs(8, eager=True)
        runner, pending = llm.engine.runner, []
        launch = runner.launch

        def counting_launch(out, pending=pending, launch=launch, **kwargs):
            pending.append(sum(s.pending_token for s in out.scheduled))
            return launch(out, **kwargs)

        runner.launch = counting_launch
        outs = llm.generate(prompts, params)
        assert (sum(pending) > 0) is mode  # async steps really fed tokens still on the device
        results[mode] = [(o.token_ids, o.text, o.finish_reason, o.stop_reason, o.logprobs) for o in outs]
        assert llm.engine.kv.pool.num_used_blocks == 0  # every block freed, spare tokens included
        assert not llm.engine.has_unfinished()
        results[f"stats-{mode}"] = llm.stats()
    assert results[True] == results[False]
    return results


def _texts(outs):
    return [text for _, text, *_ in outs]


def test_default_is_off_on_cpu_and_the_flag_is_validated(tiny_llama):
    assert EngineConfig(tiny_llama).resolved_async_scheduling("cpu") is False
    assert EngineConfig(tiny_llama).resolved_async_scheduling("cuda") is True
    assert EngineConfig(tiny_llama, async_scheduling=False).resolved_async_scheduling("cuda") is False
    with pytest.raises(ValueError, match="async_scheduling"):
        EngineConfig(tiny_llama, async_scheduling="yes")


@pytest.mark.parametrize("eager_graphs", [False, True])
def test_greedy_varied_lengths_match(tiny_models, eager_graphs):
    prompts = _prompts(7)
    params = [SamplingParams(max_tokens=5 + 4 * i, temperature=0.0, ignore_eos=True) for i in range(7)]
    res = _run(tiny_models["llama"], prompts, params, eager_graphs=eager_graphs, max_num_seqs=8)
    assert [len(t) for t, *_ in res[True]] == [5 + 4 * i for i in range(7)]


def test_seeded_sampling_and_min_tokens_match(tiny_qwen3):
    prompts = _prompts(5, seed=11)
    params = [
        SamplingParams(max_tokens=20, temperature=0.9, top_k=30, top_p=0.9, seed=100 + i, min_tokens=i)
        for i in range(5)
    ]
    _run(tiny_qwen3, prompts, params)


def test_eos_stop_ids_and_stop_strings_match(tiny_qwen3):
    sampled = {"max_tokens": 40, "temperature": 1.0, "seed": 5, "ignore_eos": True}
    (full,) = LLM(tiny_qwen3, device="cpu", dtype="float32").generate(
        ["class HelpFormatter(object):"], SamplingParams(**sampled)
    )
    stop = next(
        full.text[i : i + 3]
        for i in range(4, len(full.text) - 3)
        if full.text[i : i + 3].isascii() and full.text.find(full.text[i : i + 3]) == i
    )
    params = [
        SamplingParams(**sampled, stop=[stop]),
        SamplingParams(**sampled, stop=[stop], include_stop_str_in_output=True),
        SamplingParams(max_tokens=30, temperature=0.0, stop_token_ids=[full.token_ids[6]]),
        SamplingParams(max_tokens=30, temperature=0.0),  # may end on EOS
    ]
    prompts = ["class HelpFormatter(object):"] * 2 + ["import os", "def main():"]
    res = _run(tiny_qwen3, prompts, params)
    assert res[True][0][2] == "stop" and res[True][0][3] == stop


def test_penalties_and_logprobs_fall_back_and_match(tiny_llama):
    prompts = _prompts(4, seed=21)
    params = [
        SamplingParams(max_tokens=12, temperature=0.0, repetition_penalty=1.3, ignore_eos=True),
        SamplingParams(max_tokens=12, temperature=0.8, seed=9, frequency_penalty=0.5, ignore_eos=True),
        SamplingParams(max_tokens=12, temperature=0.0, logprobs=2, ignore_eos=True),
        SamplingParams(max_tokens=12, temperature=0.0, ignore_eos=True),
    ]
    res = _run(tiny_llama, prompts, params)
    assert len(res[True][2][4]) == 12


def test_preemption_matches(tiny_llama):
    prompts = _prompts(6, seed=4, low=20, high=40)
    params = SamplingParams(max_tokens=40, temperature=0.0, ignore_eos=True)
    res = _run(tiny_llama, prompts, params, num_gpu_blocks=16, block_size=8, max_num_seqs=6, max_model_len=96)
    assert res["stats-True"].num_preemptions > 0 and res["stats-False"].num_preemptions > 0


def _stream(core, prompts, params, abort_at=None):
    """Stream every request through the drive loop; abort r1 after turn ``abort_at``."""
    commands = CommandQueue(waits=False)
    for i, prompt in enumerate(prompts):
        commands.put(AddRequest(f"r{i}", prompt, params, None, time.monotonic()))
    got = {f"r{i}": {"ids": [], "text": "", "final": None} for i in range(len(prompts))}
    turns = 0

    def sink(outs, refusals):
        nonlocal turns
        assert refusals == []
        turns += 1
        if turns == abort_at:
            commands.put(AbortRequest("r1"))  # applied before the next turn's step
        for out in outs:
            g = got[out.request_id]
            assert g["final"] is None, "no output after the final one"
            g["ids"] += out.new_token_ids
            g["text"] += out.new_text
            if out.finished:
                g["final"] = (out.token_ids, out.text, out.finish_reason)

    drive(core, commands, sink)
    return got


@pytest.mark.parametrize("abort_at", [None, 6])
def test_streamed_deltas_and_abort(tiny_llama, abort_at):
    prompts = _prompts(3, seed=8)
    params = SamplingParams(max_tokens=15, temperature=0.0, ignore_eos=True)
    results = {}
    for mode in (False, True):
        core = EngineCore(EngineConfig(tiny_llama, device="cpu", dtype="float32", async_scheduling=mode))
        got = _stream(core, prompts, params, abort_at)
        for g in got.values():
            assert g["final"] is not None and (g["ids"], g["text"]) == g["final"][:2]
        assert core.kv.pool.num_used_blocks == 0
        results[mode] = got
    if abort_at is None:
        assert results[True] == results[False]
    else:  # the abort lands one step later in the token stream when outputs lag a step
        for rid in ("r0", "r2"):
            assert results[True][rid] == results[False][rid]
        assert results[True]["r1"]["final"][2] == "abort"
        off, on = results[False]["r1"]["ids"], results[True]["r1"]["ids"]
        assert on == off[: len(on)] and len(off) - 1 <= len(on) <= len(off)
