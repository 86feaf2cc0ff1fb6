"""The engine in batch-invariant mode with every kernel on Triton (CPU interpreter): every product
goes through kernels/invariant_matmul.py and every attention call, prompt or decode, through
kernels/invariant_attention.py; greedy tokens still match transformers (fp32), a request alone and
in a batch with chunked prefill gives the same tokens and logprobs, and models the mode does not
cover yet are refused by name."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM

from engine import LLM, SamplingParams
from kernels import gemv, invariant_attention, invariant_matmul, paged_attention_decode
from tests.support.row_invariant_dot import install_row_invariant_dot

NEW_TOKENS = 4


@pytest.fixture
def invariant_launches(monkeypatch):
    if torch.cuda.is_available():
        pytest.skip("Triton on CPU tensors needs the interpreter, which is off where CUDA exists")
    monkeypatch.setenv("CHASSIS_KERNELS", "triton")
    install_row_invariant_dot(monkeypatch)  # the GPU's MMA rows (tests/support/row_invariant_dot.py)
    launches = []
    for module in (invariant_matmul, invariant_attention, gemv, paged_attention_decode):
        original = module._launch

        def counted(*args, _original=original, _name=module.__name__, **kwargs):
            launches.append(_name)
            return _original(*args, **kwargs)

        monkeypatch.setattr(module, "_launch", counted)
    return launches


@pytest.mark.slow
def test_llama_in_batch_invariant_mode(tiny_llama, invariant_launches):
    hf = AutoModelForCausalLM.from_pretrained(tiny_llama, dtype=torch.float32).eval()
    gen = torch.Generator().manual_seed(3)
    prompts = [torch.randint(3, hf.config.vocab_size, (n,), generator=gen).tolist() for n in (5, 19)]
    with torch.no_grad():
        expected = [
            hf.generate(torch.tensor([p]), max_new_tokens=NEW_TOKENS, do_sample=False, pad_token_id=0)[
                0, len(p) :
            ]
            for p in prompts
        ]
    llm = LLM(tiny_llama, device="cpu", dtype="float32", batch_invariant=True, max_num_batched_tokens=8)
    greedy = SamplingParams(max_tokens=NEW_TOKENS, temperature=0.0, ignore_eos=True, logprobs=1)
    sampled = SamplingParams(
        max_tokens=NEW_TOKENS, temperature=0.9, top_p=0.9, seed=5, ignore_eos=True, logprobs=1
    )
    together = llm.generate(prompts + prompts, [greedy, greedy, sampled, sampled])
    for i, out in enumerate(together[:2]):
        hf_tokens = expected[i].tolist()  # transformers stops at its EOS id; ignore_eos runs on
        assert out.token_ids[: len(hf_tokens)] == hf_tokens, f"prompt {i} diverged from transformers"
    assert set(invariant_launches) == {invariant_matmul.__name__, invariant_attention.__name__}
    llm.engine.kv.reset_prefix_cache()
    for i, params in ((1, greedy), (3, sampled)):  # alone, nothing cached, chunks of 8 tokens
        (alone,) = llm.generate([prompts[i % 2]], params)
        assert alone.token_ids == together[i].token_ids
        assert [(lp.token_id, lp.logprob, lp.top) for lp in alone.logprobs] == [
            (lp.token_id, lp.logprob, lp.top) for lp in together[i].logprobs
        ]


@pytest.mark.parametrize("arch", ["qwen3_moe", "deepseek_v2"])
def test_moe_and_mla_models_are_refused_by_name_where_triton_runs(tiny_models, arch, monkeypatch):
    monkeypatch.setenv("CHASSIS_KERNELS", "triton")  # as on a GPU (here Triton's interpreter)
    with pytest.raises(ValueError, match="batch_invariant is not supported for"):
        LLM(tiny_models[arch], device="cpu", dtype="float32", batch_invariant=True)
    # A CPU's torch path runs them invariantly (tests/engine/test_seed_batch_invariance.py).
