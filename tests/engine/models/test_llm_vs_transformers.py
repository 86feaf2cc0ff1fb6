"""Acceptance 1: our engine against transformers on the same tiny checkpoints, fp32 on CPU."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM

from engine import LLM, SamplingParams
from engine.testing.tiny_model import ARCHES

NEW_TOKENS = 16
PROMPT_LENGTHS = (5, 23, 40, 61)  # 40 and 61 exceed Mistral's sliding window of 24
MODES = {
    "prefix-cache": {"enable_prefix_caching": True},
    "no-prefix-cache": {"enable_prefix_caching": False},
    "chunked-prefill-16": {"max_num_batched_tokens": 16},
    # Whole contexts, so Mistral's windowed layers fill 8 blocks too (a windowed pool rarely runs
    # dry: preemption there is tests/engine/test_swa_bounded_replay.py's).
    "preemption": {"num_gpu_blocks": 8, "max_model_len": 128, "sliding_window_kv": "full-context"},
}


def _prompts(vocab: int) -> list[list[int]]:
    gen = torch.Generator().manual_seed(123)
    return [torch.randint(3, vocab, (n,), generator=gen).tolist() for n in PROMPT_LENGTHS]


@pytest.fixture(scope="module")
def oracle(tiny_models):
    """arch -> (prompts, greedy continuations, logits at every generated position) from transformers."""
    cache = {}

    def get(arch):
        if arch not in cache:
            model = AutoModelForCausalLM.from_pretrained(tiny_models[arch], dtype=torch.float32).eval()
            model.generation_config.eos_token_id = None  # compare full-length runs (we pass ignore_eos)
            prompts = _prompts(model.config.vocab_size)
            tokens, logits = [], []
            with torch.no_grad():
                for p in prompts:
                    x = torch.tensor([p])
                    out = model.generate(x, max_new_tokens=NEW_TOKENS, do_sample=False, pad_token_id=0)
                    gen = out[0, len(p) :].tolist()
                    assert len(gen) == NEW_TOKENS
                    full = model(out).logits[0]
                    tokens.append(gen)
                    logits.append(full[len(p) - 1 : len(p) - 1 + NEW_TOKENS])
            cache[arch] = (prompts, tokens, logits)
        return cache[arch]

    return get


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("arch", ARCHES)
def test_greedy_batch_matches_transformers(tiny_models, oracle, arch, mode):
    prompts, ref_tokens, ref_logits = oracle(arch)
    llm = LLM(tiny_models[arch], device="cpu", dtype="float32", **MODES[mode])
    llm.engine.runner.keep_logits = True
    outs = llm.generate(prompts, SamplingParams(max_tokens=NEW_TOKENS, temperature=0.0, ignore_eos=True))
    for i, out in enumerate(outs):
        assert out.prompt_token_ids == prompts[i]
        assert out.token_ids == ref_tokens[i], f"prompt {i} ({len(prompts[i])} tokens) diverged"
        assert out.finish_reason == "length"
        ours = torch.stack(llm.engine.recorded_logits[out.request_id])
        rel = (ours - ref_logits[i]).abs().max() / ref_logits[i].abs().max()
        assert rel < 1e-4, f"prompt {i}: logits relative error {rel:.2e}"
    stats = llm.stats()
    if mode == "preemption":
        assert stats.num_preemptions > 0
    if mode == "chunked-prefill-16":
        assert max(PROMPT_LENGTHS) > 16  # the long prompts really were split
    assert stats.num_blocks_used == 0  # everything freed at the end
