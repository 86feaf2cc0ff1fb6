"""Acceptance 3: a seeded sample depends only on (prompt, params, seed), not on the batch."""

import random

from engine import LLM, SamplingParams

TARGET_PROMPT = "def parse_args(self, args=None, namespace=None):"


def _noise_requests(n):
    rng = random.Random(99)
    prompts, params = [], []
    for _ in range(n):
        prompts.append([rng.randrange(3, 500) for _ in range(rng.randrange(2, 60))])
        params.append(
            SamplingParams(
                max_tokens=rng.randrange(1, 30),
                temperature=rng.choice([0.0, 0.7, 1.0, 1.3]),
                top_p=rng.choice([1.0, 0.9]),
                top_k=rng.choice([0, 20]),
                seed=rng.choice([None, rng.randrange(1000)]),
                ignore_eos=True,
            )
        )
    return prompts, params


def test_same_seed_same_tokens_alone_and_in_a_batch(tiny_qwen3):
    target = SamplingParams(max_tokens=24, temperature=1.0, seed=1234, ignore_eos=True)
    llm = LLM(tiny_qwen3, max_num_batched_tokens=64)  # chunked prefill also reshapes the batches
    (alone,) = llm.generate([TARGET_PROMPT], target)
    noise_prompts, noise_params = _noise_requests(8)
    batch = llm.generate(
        noise_prompts[:4] + [TARGET_PROMPT] + noise_prompts[4:],
        noise_params[:4] + [target] + noise_params[4:],
    )
    assert batch[4].token_ids == alone.token_ids
    (again,) = LLM(tiny_qwen3).generate([TARGET_PROMPT], target)  # another engine, other batch shapes
    assert again.token_ids == alone.token_ids
    # and the seed matters: the test would notice sampling that ignores it
    (other,) = llm.generate(
        [TARGET_PROMPT], SamplingParams(max_tokens=24, temperature=1.0, seed=4321, ignore_eos=True)
    )
    assert other.token_ids != alone.token_ids
