"""DeepSeek-V3 (engine/models/deepseek_v3.py): multi-head latent attention with q-LoRA (and without),
YaRN with DeepSeek's softmax-scale correction, sigmoid routing with the score-correction bias over
groups ranked by their best two experts, and the multi-token-prediction layer kept but not run;
against transformers on a tiny checkpoint."""

import pytest
import torch
from safetensors.torch import load_file

from engine import LLM
from engine.checkpoint import load_model_config
from engine.checkpoint.errors import CheckpointError
from engine.models import registry
from engine.models.deepseek_v3 import DEEPSEEK_V3
from engine.testing import tiny_deepseek as tiny
from tests.support.deepseek_edits import with_config, with_q_lora
from tests.support.oracle import assert_matches_transformers


def test_deepseek_v3_is_served_by_its_module(tiny_models):
    cfg = load_model_config(tiny_models["deepseek_v3"])
    assert registry.get_architecture("DeepseekV3ForCausalLM") is DEEPSEEK_V3
    assert cfg.mla.q_lora_rank == tiny.Q_LORA_RANK and cfg.mla.rope_interleave
    assert cfg.num_heads == cfg.num_kv_heads and cfg.head_dim == cfg.mla.qk_head_dim
    moe = cfg.moe
    assert (moe.scoring, moe.group_score, moe.score_correction_bias) == ("sigmoid", "top2_sum", True)
    assert (moe.num_groups, moe.topk_groups, moe.renormalize) == (tiny.GROUPS, tiny.TOPK_GROUPS, True)
    assert moe.moe_layers == (False, True)
    assert cfg.num_mtp_layers == tiny.MTP_LAYERS
    assert cfg.rope_scaling["mscale"] != cfg.rope_scaling["mscale_all_dim"]


def test_deepseek_v3_matches_transformers(tiny_models):
    assert_matches_transformers(tiny_models["deepseek_v3"], prompt_lengths=(6, 29, 45))


def test_deepseek_v3_without_q_lora_matches_transformers(tiny_models, tmp_path):
    path = with_q_lora(tiny_models["deepseek_v3"], tmp_path / "no-q-lora", q_lora_rank=None)
    llm = assert_matches_transformers(path)
    assert llm.engine.runner.model.layers[0].self_attn.q_b_proj is None


def test_rope_without_interleave_matches_transformers(tiny_models, tmp_path):
    path = with_config(tiny_models["deepseek_v3"], tmp_path / "half-split", rope_interleave=False)
    llm = assert_matches_transformers(path)
    assert llm.engine.runner.model.layers[0].self_attn.attn.rotary.is_neox


def test_the_mtp_layer_is_kept_as_stored(tiny_models):
    path = tiny_models["deepseek_v3"]
    model = LLM(path, device="cpu", dtype="float32").engine.runner.model
    stored = load_file(str(path / "model.safetensors"))
    prefix = "model.layers.2."  # after the 2 decoder layers
    expected = {n.removeprefix(prefix): t for n, t in stored.items() if n.startswith(prefix)}
    (held,) = model.mtp.layers
    assert set(held) == set(expected)
    assert {"enorm.weight", "hnorm.weight", "eh_proj.weight", "shared_head.head.weight"} <= set(held)
    assert "mlp.experts.7.down_proj.weight" in held and "self_attn.kv_b_proj.weight" in held
    assert all(torch.equal(held[n], expected[n]) for n in held)
    assert len(model.layers) == 2  # not part of decoding


def test_a_layer_past_the_mtp_layers_is_unexpected(tiny_models, tmp_path):
    from safetensors.torch import save_file

    path = with_config(tiny_models["deepseek_v3"], tmp_path / "stray")
    tensors = load_file(str(path / "model.safetensors"))
    tensors["model.layers.3.enorm.weight"] = torch.ones(64)
    save_file(tensors, str(path / "model.safetensors"))
    with pytest.raises(CheckpointError, match="model.layers.3.enorm.weight"):
        LLM(path, device="cpu", dtype="float32")
