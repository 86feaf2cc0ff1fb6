"""Greedy outputs with speculation on are token-for-token those with it off: n-gram drafts on a
tiny checkpoint, including preemption, mixed batches (speculating, sampled with logprobs, mid
prefill), stop strings and async scheduling; rejected drafts leave no block behind."""

import random

import pytest

from engine import LLM, SamplingParams


def _prompts(n, seed=5):
    """Prompts that repeat a phrase, so n-gram lookup finds drafts (some right, most wrong)."""
    rng = random.Random(seed)
    prompts = []
    for _ in range(n):
        phrase = [rng.randrange(3, 300) for _ in range(rng.randrange(3, 9))]
        prompts.append(
            [rng.randrange(3, 300) for _ in range(rng.randrange(1, 20))] + phrase * rng.randrange(2, 5)
        )
    return prompts


def _generate(model, prompts, params, graphs: int = 0, **kwargs):
    """``graphs``: capture decode graphs up to that many rows, replayed eagerly (the CPU's stand-in
    for CUDA graphs: the same static-buffer path); plain and verify steps that fit run through them."""
    llm = LLM(model, device="cpu", dtype="float32", **kwargs)
    if graphs:
        llm.engine.runner.capture_decode_graphs(graphs, eager=True)
    outs = llm.generate(prompts, params)
    assert llm.engine.kv.pool.num_used_blocks == 0
    if graphs and llm.engine.speculator is not None:
        assert llm.engine.runner.graphs.verify_steps_run > 0
    return [(o.token_ids, o.text, o.finish_reason) for o in outs], llm.stats()


@pytest.mark.parametrize(
    ("async_scheduling", "graphs"), [(False, 0), (True, 0), (True, 32)], ids=["sync", "async", "async-graphs"]
)
def test_ngram_greedy_matches_no_speculation(tiny_llama, async_scheduling, graphs):
    prompts = _prompts(12)
    params = SamplingParams(max_tokens=40, temperature=0.0, ignore_eos=True)
    off, _ = _generate(tiny_llama, prompts, params, graphs, async_scheduling=async_scheduling)
    on, stats = _generate(
        tiny_llama, prompts, params, graphs, async_scheduling=async_scheduling, speculative_method="ngram"
    )
    assert on == off
    assert stats.spec_decode_num_drafts > 0 and stats.spec_decode_num_accepted_tokens > 0
    assert stats.spec_decode_num_accepted_tokens <= stats.spec_decode_num_draft_tokens


def test_ngram_greedy_under_preemption_and_prefix_caching(tiny_llama):
    prompts = _prompts(10, seed=7)
    params = SamplingParams(max_tokens=48, temperature=0.0, ignore_eos=True)
    kwargs = dict(num_gpu_blocks=30, block_size=4, max_model_len=112, max_num_batched_tokens=32)
    off, _ = _generate(tiny_llama, prompts, params, **kwargs)
    on, stats = _generate(tiny_llama, prompts, params, speculative_method="ngram", **kwargs)
    assert on == off
    assert stats.num_preemptions > 0 and stats.spec_decode_num_accepted_tokens > 0
    # The prefix cache holds only verified tokens: a second pass over the same prompts hits it and
    # still gives the same tokens.
    llm = LLM(tiny_llama, device="cpu", dtype="float32", speculative_method="ngram", block_size=4)
    first = [o.token_ids for o in llm.generate(prompts, params)]
    second = [o.token_ids for o in llm.generate(prompts, params)]
    assert first == second == [t for t, _, _ in off]
    assert llm.stats().prefix_cache_hits > 0


def test_mixed_batch_of_speculating_and_other_requests(tiny_llama):
    prompts = _prompts(6, seed=9) + [[7] * 150]  # the last one prefills in chunks
    greedy = SamplingParams(max_tokens=30, temperature=0.0, ignore_eos=True)
    stop = SamplingParams(max_tokens=30, temperature=0.0, stop_token_ids=[5, 6, 7, 8, 9])
    with_logprobs = SamplingParams(max_tokens=30, temperature=0.0, logprobs=2, ignore_eos=True)
    params = [greedy, stop, with_logprobs, greedy, stop, greedy, greedy]

    def run(**kwargs):
        llm = LLM(tiny_llama, device="cpu", dtype="float32", max_num_batched_tokens=64, **kwargs)
        return llm.generate(prompts, params), llm

    def logprob_values(out) -> list[float]:
        return [value for lp in out.logprobs for value in (lp.logprob, *(v for _, v in lp.top))]

    off, _ = run()
    on, llm = run(speculative_method="ngram")
    assert [(o.token_ids, o.text, o.finish_reason, o.stop_reason) for o in on] == [
        (o.token_ids, o.text, o.finish_reason, o.stop_reason) for o in off
    ]
    # The logprobs request never speculates, but it shares steps whose LM head runs over more rows
    # when its neighbours verify drafts; the CPU GEMM may then round the last bits differently
    # (seen in CI: 1e-7 relative). Its tokens and top ids are exact; its logprob values agree to 1e-5.
    assert [[(lp.token_id, [t for t, _ in lp.top]) for lp in on[2].logprobs]] == [
        [(lp.token_id, [t for t, _ in lp.top]) for lp in off[2].logprobs]
    ]
    assert logprob_values(on[2]) == pytest.approx(logprob_values(off[2]), rel=1e-5)
    assert llm.stats().spec_decode_num_drafts > 0


@pytest.mark.parametrize("draft", ["llama", "mistral"])
def test_draft_model_greedy_matches_no_speculation(tiny_models, draft):
    """The target drafting for itself (every draft token right) and another model (mostly wrong)."""
    prompts = _prompts(8, seed=13)
    params = SamplingParams(max_tokens=24, temperature=0.0, ignore_eos=True)
    kwargs = dict(num_gpu_blocks=40, block_size=4, max_model_len=112, max_num_batched_tokens=48)
    off, _ = _generate(tiny_models["llama"], prompts, params, **kwargs)
    on, stats = _generate(
        tiny_models["llama"],
        prompts,
        params,
        speculative_method="draft_model",
        speculative_model=str(tiny_models[draft]),
        speculative_scheduling="fixed",  # the tiny models are unconfident: the policy would not draft
        **kwargs,
    )
    assert on == off
    assert stats.spec_decode_num_drafts > 0
    if draft == "llama":
        assert stats.spec_decode_num_accepted_tokens == stats.spec_decode_num_draft_tokens


def test_mtp_greedy_matches_no_speculation(tiny_models):
    """DeepSeek-V3's MTP layer drafting (chained past one token) for its own tiny checkpoint."""
    model = tiny_models["deepseek_v3"]
    prompts = _prompts(6, seed=17)
    params = SamplingParams(max_tokens=20, temperature=0.0, ignore_eos=True)
    kwargs = dict(num_gpu_blocks=40, block_size=4, max_model_len=112, max_num_batched_tokens=48)
    off, _ = _generate(model, prompts, params, **kwargs)
    on, stats = _generate(
        model, prompts, params, speculative_method="mtp", speculative_scheduling="fixed", **kwargs
    )
    assert on == off
    assert stats.spec_decode_num_drafts > 0
    assert stats.spec_decode_num_draft_tokens > stats.spec_decode_num_drafts  # chained drafts


def test_a_stop_string_inside_an_accepted_draft_ends_the_output_where_it_would_without(tiny_llama):
    prompts = _prompts(4, seed=21)
    plain = SamplingParams(max_tokens=40, temperature=0.0, ignore_eos=True)
    texts = [t for _, t, _ in _generate(tiny_llama, prompts, plain)[0]]
    params = [
        SamplingParams(max_tokens=40, temperature=0.0, ignore_eos=True, stop=[text[len(text) // 2 :][:2]])
        for text in texts
        if len(text) > 8
    ]
    prompts = [p for p, text in zip(prompts, texts, strict=True) if len(text) > 8]
    off, _ = _generate(tiny_llama, prompts, params)
    on, stats = _generate(
        tiny_llama, prompts, params, speculative_method="ngram", speculative_scheduling="fixed"
    )
    assert on == off
    assert any(reason == "stop" for _, _, reason in off)
    assert stats.spec_decode_num_accepted_tokens > 0


def test_a_speculating_step_left_without_drafts_runs_overlapped(tiny_llama):
    """Async scheduling: when the policy asks the proposer but no draft comes back, the step is
    launched like a plain one (the next overlaps it) instead of being run to its samples."""
    prompts = _prompts(4)
    params = SamplingParams(max_tokens=12, temperature=0.0, ignore_eos=True)
    off, _ = _generate(tiny_llama, prompts, params, async_scheduling=True)
    llm = LLM(tiny_llama, device="cpu", dtype="float32", async_scheduling=True, speculative_method="ngram")
    core = llm.engine
    proposals, run_to_samples = [], []
    core.speculator.proposer.propose = lambda requests, max_len: proposals.append(len(requests)) or {}
    execute = core._execute
    core._execute = lambda out: run_to_samples.append(out) or execute(out)
    outs = llm.generate(prompts, params)
    assert [(o.token_ids, o.text, o.finish_reason) for o in outs] == off
    assert proposals and not run_to_samples
    assert core.speculator.policy.plain_step_time.steps > 0  # the overlapped steps price plain steps
