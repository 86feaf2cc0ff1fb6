"""The engine with every kernel on Triton (CPU interpreter) and the Triton GEMV forced for every
product of <= 8 rows (the norms before q/k/v, gate/up and the LM head folded into theirs) still
matches transformers greedily, fp32 on CPU."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM

from engine import LLM, SamplingParams
from kernels import gemv, gemv_norm

NEW_TOKENS = 8
PROMPT_LENGTHS = (5, 23)  # a prompt short enough for the GEMV at prefill, and one that is not


@pytest.fixture
def triton_gemv_everywhere(monkeypatch):
    if torch.cuda.is_available():
        pytest.skip("Triton on CPU tensors needs the interpreter, which is off where CUDA exists")
    monkeypatch.setenv("CHASSIS_KERNELS", "triton")
    monkeypatch.setenv("CHASSIS_GEMV", "triton")
    launches = []
    original = gemv._launch

    def counted(x, weight, bias, gated, config=None, **kwargs):
        launches.append((x.shape[0], gated))
        return original(x, weight, bias, gated, config, **kwargs)

    def counted_normed(x, residual, norm_weight, eps, weight, bias, config=None):
        launches.append((x.shape[0], "normed" if residual is not None else "normed, no residual"))
        return original_normed(x, residual, norm_weight, eps, weight, bias, config)

    original_normed = gemv_norm._launch
    monkeypatch.setattr(gemv, "_launch", counted)
    monkeypatch.setattr(gemv_norm, "_launch", counted_normed)
    return launches


# qwen2: the GEMV adds the q/k/v bias; qwen3: RMSNorm on q and k heads after the fused projection;
# deepseek: the MLA input projection, its latent cache write and decode, and the MoE layers on Triton;
# gemma: soft-capped scores in the prefill and decode kernels, the GeGLU kernel, Gemma-3's q/k norms
@pytest.mark.parametrize(
    "arch", ["llama", "qwen2", "qwen3", "deepseek_v2", "deepseek_v3", "gemma2", "gemma3"]
)
def test_greedy_matches_transformers_through_the_triton_gemv(tiny_models, triton_gemv_everywhere, arch):
    hf = AutoModelForCausalLM.from_pretrained(tiny_models[arch], dtype=torch.float32).eval()
    gen = torch.Generator().manual_seed(7)
    prompts = [torch.randint(3, hf.config.vocab_size, (n,), generator=gen).tolist() for n in PROMPT_LENGTHS]
    expected_tokens, expected_logits = [], []
    with torch.no_grad():
        for p in prompts:
            out = hf.generate(torch.tensor([p]), max_new_tokens=NEW_TOKENS, do_sample=False, pad_token_id=0)
            expected_tokens.append(out[0, len(p) :].tolist())
            expected_logits.append(hf(out).logits[0, len(p) - 1 : len(p) - 1 + NEW_TOKENS])

    llm = LLM(tiny_models[arch], device="cpu", dtype="float32")
    llm.engine.runner.keep_logits = True
    outs = llm.generate(prompts, SamplingParams(max_tokens=NEW_TOKENS, temperature=0.0, ignore_eos=True))
    for i, out in enumerate(outs):
        assert out.token_ids == expected_tokens[i], f"prompt {i} diverged"
        ours = torch.stack(llm.engine.recorded_logits[out.request_id])
        rel = (ours - expected_logits[i]).abs().max() / expected_logits[i].abs().max()
        assert rel < 1e-4, f"prompt {i}: logits relative error {rel:.2e}"
    # Both requests decode together: 2-row products, the SwiGLU one fused into the down projection,
    # the norms into the q/k/v, gate/up and LM-head products (the first layer's has no residual).
    # Gemma's are not: its GeGLU has no fused GEMV, and its norms multiply an fp32 1 + w into the
    # unrounded normalised value (engine/layers/norm.py), which the fused GEMV does not.
    expected = {(2, False)}
    if not arch.startswith("gemma"):
        expected |= {(2, True), (2, "normed"), (2, "normed, no residual")}
    assert expected <= set(triton_gemv_everywhere)
