"""YaRN rotary scaling (kernels/rotary.py) against transformers' own rope init function, and a
Qwen3 checkpoint with YaRN against transformers end to end."""

import json
import math
import shutil

import pytest
import torch
from transformers import AutoModelForCausalLM, DeepseekV3Config, Qwen3Config
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

from engine import LLM, SamplingParams
from engine.checkpoint import load_model_config
from kernels.rotary import build_cos_sin_cache, yarn_softmax_scale

MAX_POSITIONS = 512
YARN_CASES = {
    "plain": {"factor": 4.0, "original_max_position_embeddings": 128},
    "betas-untruncated": {
        "factor": 8.0,
        "original_max_position_embeddings": 64,
        "beta_fast": 16,
        "beta_slow": 2,
        "truncate": False,
    },
    "deepseek-mscale": {
        "factor": 40.0,
        "original_max_position_embeddings": 64,
        "beta_fast": 32,
        "beta_slow": 1,
        "mscale": 1.0,
        "mscale_all_dim": 0.8,
    },
    "attention-factor": {"factor": 2.0, "original_max_position_embeddings": 256, "attention_factor": 0.9},
}


def _hf_yarn(head_dim: int, base: float, params: dict) -> tuple[torch.Tensor, float]:
    config = Qwen3Config(
        hidden_size=4 * head_dim,
        num_attention_heads=4,
        head_dim=head_dim,
        max_position_embeddings=MAX_POSITIONS,
        rope_parameters={"rope_type": "yarn", "rope_theta": base, **params},
    )
    return ROPE_INIT_FUNCTIONS["yarn"](config, "cpu")


@pytest.mark.parametrize("case", list(YARN_CASES))
@pytest.mark.parametrize("head_dim", [16, 64])
def test_yarn_cache_matches_transformers(case, head_dim):
    params = YARN_CASES[case]
    inv_freq, attention_factor = _hf_yarn(head_dim, 10000.0, params)
    freqs = torch.arange(MAX_POSITIONS).float()[:, None] * inv_freq[None, :]
    expected = torch.cat((freqs.cos() * attention_factor, freqs.sin() * attention_factor), dim=-1)
    ours = build_cos_sin_cache(head_dim, MAX_POSITIONS, 10000.0, {"rope_type": "yarn", **params})
    assert attention_factor != 1.0 or case == "plain"
    torch.testing.assert_close(ours, expected, rtol=0, atol=1e-6)


def test_deepseek_softmax_scale_correction_matches_transformers():
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import yarn_apply_mscale

    params = {"rope_type": "yarn", **YARN_CASES["deepseek-mscale"]}
    assert yarn_softmax_scale(params) == pytest.approx(yarn_apply_mscale(params, 1.0), rel=1e-12)
    assert yarn_softmax_scale(params) == pytest.approx((0.1 * 0.8 * math.log(40.0) + 1.0) ** 2)
    assert yarn_softmax_scale({"rope_type": "yarn", "factor": 4.0}) == 1.0  # no mscale_all_dim
    assert yarn_softmax_scale(None) == 1.0


def test_deepseek_yarn_uses_the_rope_head_dim():
    """DeepSeek configs set head_dim to qk_rope_head_dim, the part YaRN rotates."""
    config = DeepseekV3Config(
        qk_rope_head_dim=16,
        max_position_embeddings=MAX_POSITIONS,
        rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, **YARN_CASES["deepseek-mscale"]},
    )
    inv_freq, attention_factor = ROPE_INIT_FUNCTIONS["yarn"](config, "cpu")
    ours = build_cos_sin_cache(16, 4, 10000.0, {"rope_type": "yarn", **YARN_CASES["deepseek-mscale"]})
    torch.testing.assert_close(ours[1, :8], (inv_freq.cos() * attention_factor), rtol=0, atol=1e-6)


def test_qwen3_with_yarn_matches_transformers(tiny_qwen3, tmp_path):
    path = shutil.copytree(tiny_qwen3, tmp_path / "yarn")
    raw = json.loads((path / "config.json").read_text())
    raw["rope_parameters"] = {
        "rope_type": "yarn",
        "rope_theta": 10000.0,
        "factor": 4.0,
        "original_max_position_embeddings": 16,  # shorter than the prompt, so scaling matters
    }
    (path / "config.json").write_text(json.dumps(raw))
    assert load_model_config(path).rope_scaling["rope_type"] == "yarn"
    hf = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    hf.generation_config.eos_token_id = None  # full-length runs, as ours with ignore_eos
    prompt = torch.randint(
        3, hf.config.vocab_size, (40,), generator=torch.Generator().manual_seed(5)
    ).tolist()
    with torch.no_grad():
        full = hf.generate(torch.tensor([prompt]), max_new_tokens=8, do_sample=False, pad_token_id=0)
        expected = hf(full).logits[0, len(prompt) - 1 : -1]
    llm = LLM(path, device="cpu", dtype="float32")
    llm.engine.runner.keep_logits = True
    (out,) = llm.generate([prompt], SamplingParams(max_tokens=8, temperature=0.0, ignore_eos=True))
    assert out.token_ids == full[0, len(prompt) :].tolist()
    ours = torch.stack(llm.engine.recorded_logits[out.request_id])
    assert (ours - expected).abs().max() / expected.abs().max() < 1e-4
