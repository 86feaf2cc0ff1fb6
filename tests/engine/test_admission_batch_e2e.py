"""EngineConfig.admission_batch end to end on CPU: a full engine gathers freed seats and admits
their prompts together, so fewer steps carry prompt chunks (the steps that run without CUDA
graphs on a GPU), and every request's tokens are the same as with admission at every step
(batch-invariant mode, so a different batching cannot move a bit)."""

import random

import pytest

from engine import LLM, SamplingParams


def _prompts(n, seed=5):
    rng = random.Random(seed)
    return [[rng.randrange(3, 400) for _ in range(rng.randrange(4, 12))] for _ in range(n)]


def _run(model, admission_batch):
    llm = LLM(
        model,
        device="cpu",
        dtype="float32",
        max_num_seqs=4,
        admission_batch=admission_batch,
        batch_invariant=True,
        enable_prefix_caching=False,
    )
    runner, chunk_steps = llm.engine.runner, []
    launch = runner.launch

    def counting_launch(out, **kwargs):
        chunk_steps.append(any(s.num_tokens > 1 for s in out.scheduled))
        return launch(out, **kwargs)

    runner.launch = counting_launch
    rng = random.Random(9)
    params = [SamplingParams(max_tokens=rng.randrange(2, 9), ignore_eos=True, temperature=0.0) for _ in range(14)]
    outs = llm.generate(_prompts(14), params)
    assert not llm.engine.has_unfinished()
    return [o.token_ids for o in outs], sum(chunk_steps)


def test_gathered_admission_keeps_every_token_and_needs_fewer_prompt_steps(tiny_llama):
    every_step, steps_every = _run(tiny_llama, 1)
    gathered, steps_gathered = _run(tiny_llama, 3)
    assert gathered == every_step
    assert all(tokens for tokens in gathered)
    assert steps_gathered < steps_every


def test_admission_batch_must_be_positive(tiny_llama):
    with pytest.raises(ValueError, match="admission_batch"):
        LLM(tiny_llama, device="cpu", dtype="float32", admission_batch=0)
