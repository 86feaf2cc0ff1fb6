"""A synchronous verify step is priced for the speculation policy by its wall-clock cost: from the
moment the step before it was read to the moment its own outputs were processed, since no other
step hides that host work (``EngineCore._execute``). Checked by the order of events on one clock,
not by durations: the seconds observed cover the runner's forward and the processing after it."""

import time

import pytest

from engine import LLM, SamplingParams

# Prompts that repeat a phrase, so n-gram lookup finds drafts.
PROMPTS = [[7 + i, 40, 41, 42, 43, 40, 41, 42, 43, 40, 41, 42, 43] for i in range(6)]


@pytest.mark.parametrize("async_scheduling", [False, True], ids=["sync", "async"])
def test_a_verify_step_is_priced_from_before_its_forward_to_after_its_processing(tiny_llama, async_scheduling):
    llm = LLM(tiny_llama, device="cpu", dtype="float32", speculative_method="ngram", async_scheduling=async_scheduling)
    core, speculator = llm.engine, llm.engine.speculator
    spans: list[tuple[float, float]] = []  # per executed step: before its forward, after its processing
    observed: list[tuple[int, float, float]] = []  # draft tokens, seconds, when observed

    execute, process, observe_time = core.runner.execute, core._process, speculator.observe_time

    def timed_execute(out):
        spans.append((time.perf_counter(), None))
        return execute(out)

    def timed_process(out, result):
        outputs = process(out, result)
        if spans and spans[-1][1] is None:
            spans[-1] = (spans[-1][0], time.perf_counter())
        return outputs

    def recording_observe_time(out, seconds):
        observed.append((out.num_draft_tokens, seconds, time.perf_counter()))
        observe_time(out, seconds)

    core.runner.execute, core._process, speculator.observe_time = timed_execute, timed_process, recording_observe_time
    llm.generate(PROMPTS, SamplingParams(max_tokens=24, temperature=0.0, ignore_eos=True))

    verify = [(seconds, at) for drafts, seconds, at in observed if drafts]
    assert verify and llm.stats().spec_decode_num_drafts > 0
    for seconds, at in verify:
        # the executed step this observation followed: its forward began at least `seconds` ago
        began, processed = max((s for s in spans if s[1] is not None and s[1] <= at), key=lambda s: s[1])
        assert at - seconds <= began and processed <= at
