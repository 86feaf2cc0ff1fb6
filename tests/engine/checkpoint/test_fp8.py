"""FP8 block-quantized weights (DeepSeek-V3's format, engine/checkpoint/fp8.py): dequantized on
load, so an FP8 checkpoint serves the same logits as its dequantized twin."""

import json

import pytest
import torch

from engine import LLM, SamplingParams
from engine.checkpoint import load_model_config
from engine.checkpoint.errors import CheckpointError
from engine.checkpoint.fp8 import dequantize_block_fp8, dequantize_fp8_weights, fp8_block_size
from engine.testing.tiny_fp8 import quantize_block_fp8, write_fp8_twins

NEW_TOKENS = 8


@pytest.mark.parametrize("block", [(128, 128), (16, 16), (8, 32)])
def test_block_dequantization_spreads_each_scale_over_its_block(block):
    weight = torch.randn(40, 72, generator=torch.Generator().manual_seed(0))
    fp8, scale_inv = quantize_block_fp8(weight, block)
    assert fp8.dtype == torch.float8_e4m3fn
    assert scale_inv.shape == (-(-40 // block[0]), -(-72 // block[1]))
    restored = dequantize_block_fp8(fp8, scale_inv, block)
    for r in (0, 39):
        for c in (0, 71):
            assert restored[r, c] == fp8[r, c].float() * scale_inv[r // block[0], c // block[1]]
    # e4m3 keeps 3 mantissa bits: each value within 1/16 of its magnitude (or of its block's scale).
    assert ((restored - weight).abs() <= weight.abs() / 16 + scale_inv.max()).all()


def test_weights_pair_with_their_scales_in_either_order():
    block = (16, 16)
    a, b = torch.randn(20, 16), torch.randn(16, 33)
    (qa, sa), (qb, sb) = quantize_block_fp8(a, block), quantize_block_fp8(b, block)
    stream = [("a.weight_scale_inv", sa), ("a.weight", qa), ("norm.weight", torch.ones(3)), ("b.weight", qb)]
    stream.append(("b.weight_scale_inv", sb))
    out = dict(dequantize_fp8_weights(stream, block))
    assert set(out) == {"a.weight", "b.weight", "norm.weight"}
    assert torch.equal(out["a.weight"], dequantize_block_fp8(qa, sa, block))
    assert torch.equal(out["b.weight"], dequantize_block_fp8(qb, sb, block))
    with pytest.raises(ValueError, match="lack their pair"):
        list(dequantize_fp8_weights([("a.weight", qa)], block))
    with pytest.raises(ValueError, match="does not give"):
        list(dequantize_fp8_weights([("a.weight", qa), ("a.weight_scale_inv", sb)], block))


def test_the_block_size_comes_from_the_quantization_config():
    assert fp8_block_size({}) is None
    assert fp8_block_size(
        {"quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]}}
    ) == (
        128,
        128,
    )
    with pytest.raises(ValueError, match="not supported"):
        fp8_block_size({"quantization_config": {"quant_method": "awq"}})
    with pytest.raises(ValueError, match="weight_block_size"):
        fp8_block_size({"quantization_config": {"quant_method": "fp8", "weight_block_size": [128]}})


def test_an_unsupported_quantization_is_refused_with_the_config(tiny_qwen3, tmp_path):
    import shutil

    path = shutil.copytree(tiny_qwen3, tmp_path / "awq")
    raw = json.loads((path / "config.json").read_text())
    raw["quantization_config"] = {"quant_method": "awq"}
    (path / "config.json").write_text(json.dumps(raw))
    with pytest.raises(CheckpointError, match="awq"):
        load_model_config(path)


def _greedy(path, prompts, dtype):
    llm = LLM(path, device="cpu", dtype=dtype)
    llm.engine.runner.keep_logits = True
    outs = llm.generate(prompts, SamplingParams(max_tokens=NEW_TOKENS, temperature=0.0, ignore_eos=True))
    return [(o.token_ids, torch.stack(llm.engine.recorded_logits[o.request_id])) for o in outs]


@pytest.mark.parametrize(
    ("arch", "block", "dtype"),
    [
        ("deepseek_v3", (128, 128), "float32"),
        ("deepseek_v3", (16, 16), "float32"),
        ("deepseek_v3", (16, 16), "bfloat16"),
        ("qwen3", (16, 16), "float32"),
    ],
)
def test_an_fp8_checkpoint_serves_its_dequantized_twin(tiny_models, tmp_path, arch, block, dtype):
    """Tolerance: tokens identical, logits within a relative 1e-6 (the same weights after
    rounding to ``dtype``, so the same arithmetic)."""
    fp8, twin = tmp_path / "fp8", tmp_path / "dequantized"
    write_fp8_twins(tiny_models[arch], fp8, twin, block, dtype)
    assert load_model_config(fp8).fp8_block_size == block
    gen = torch.Generator().manual_seed(3)
    prompts = [torch.randint(3, 500, (n,), generator=gen).tolist() for n in (7, 30)]
    for (tokens, logits), (twin_tokens, twin_logits) in zip(
        _greedy(fp8, prompts, dtype), _greedy(twin, prompts, dtype), strict=True
    ):
        assert tokens == twin_tokens
        assert (logits - twin_logits).abs().max() / twin_logits.abs().max() < 1e-6
