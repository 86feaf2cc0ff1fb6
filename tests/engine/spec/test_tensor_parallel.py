"""Speculation under tensor parallelism (CPU, gloo, two real rank processes): every rank computes
the draft positions' logits rows, rank 0 drafts and verifies, and greedy tokens equal the
single-process engine's without speculation, async scheduling on and off."""

import pytest

from engine import LLM
from engine.sampling.params import SamplingParams

PROMPTS = [[5, 6, 7, 8, 9, 10] * 6, [21, 22, 23, 24] * 8 + [3], "def main(argv):\n    def main(argv):"]
GREEDY = SamplingParams(max_tokens=16, temperature=0.0, ignore_eos=True)


@pytest.mark.parametrize("async_scheduling", [False, True])
def test_ngram_under_tensor_parallel_matches_one_process_without_speculation(tiny_llama, async_scheduling):
    with LLM(tiny_llama, device="cpu", dtype="float32") as llm:
        expected = [o.token_ids for o in llm.generate(PROMPTS, GREEDY)]
    with LLM(
        tiny_llama,
        device="cpu",
        dtype="float32",
        tensor_parallel_size=2,
        speculative_method="ngram",
        speculative_scheduling="fixed",
        async_scheduling=async_scheduling,
        max_num_batched_tokens=32,
    ) as llm:
        assert [o.token_ids for o in llm.generate(PROMPTS, GREEDY)] == expected
        assert llm.stats().spec_decode_num_draft_tokens > 0
