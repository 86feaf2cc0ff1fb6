"""The start-up warm-up (CUDA only in production) runs real steps and leaves no trace: on CPU it is
called directly, with the same scheduler and runner code."""

import pytest

from engine import LLM, SamplingParams
from engine.core.warm_up import (
    FIRST_ROW_BUCKET,
    FIRST_TOKEN_BUCKET,
    MIXED_PROMPT_LENS,
    SHORT_PROMPT,
    buckets,
    warm_up,
)


@pytest.mark.parametrize("async_scheduling", [False, True])
def test_warm_up_runs_mixed_steps_and_leaves_no_trace(tiny_llama, async_scheduling):
    prompt = list(range(5, 45))
    params = SamplingParams(max_tokens=8, temperature=0.0)
    expected = LLM(tiny_llama, device="cpu", dtype="float32").generate([prompt], params)[0].token_ids
    llm = LLM(tiny_llama, device="cpu", dtype="float32", async_scheduling=async_scheduling)
    core = llm.engine

    launched = []
    launch = core.runner.launch

    def counting_launch(out, **kwargs):
        launched.append(sorted(s.num_tokens for s in out.scheduled))
        return launch(out, **kwargs)

    core.runner.launch = counting_launch
    execute = core.runner.execute
    core.runner.execute = lambda out: (
        launched.append(sorted(s.num_tokens for s in out.scheduled)),
        execute(out),
    )[1]
    before = core.stats()
    events_before = core.kv_events.last_seq
    warm_up(core)

    # One mixed step per tile class: a prompt of each length prefilled beside a decoding request.
    for n in MIXED_PROMPT_LENS:
        assert any(n in step and 1 in step for step in launched), (n, launched)
    # Then every sampled-row bucket (short prompts at once) and prefill-token bucket, eagerly.
    config = core.config
    rows_fit = min(config.max_num_seqs, config.max_num_batched_tokens // SHORT_PROMPT)
    for rows in buckets(FIRST_ROW_BUCKET, rows_fit):
        assert [SHORT_PROMPT] * rows in launched, rows
    token_buckets = buckets(FIRST_TOKEN_BUCKET, min(config.max_num_batched_tokens, core.max_model_len - 1))
    assert token_buckets and all([n] in launched for n in token_buckets), (token_buckets, launched[-3:])
    after = core.stats()
    assert (after.prompt_tokens, after.generation_tokens) == (before.prompt_tokens, before.generation_tokens)
    assert (after.prefix_cache_queries, after.num_blocks_used) == (
        before.prefix_cache_queries,
        before.num_blocks_used,
    )
    assert core.kv_events.last_seq == events_before
    assert not core.has_unfinished()
    assert llm.generate([prompt], params)[0].token_ids == expected
    with pytest.raises(RuntimeError, match="before the engine serves"):
        warm_up(core)  # blocks are cached now: a second warm-up would overwrite them


def test_buckets_double_from_the_first_and_end_at_the_last():
    assert buckets(16, 256) == [16, 32, 64, 128, 256]
    assert buckets(512, 1500) == [512, 1024, 1500]
    assert buckets(16, 10) == []
