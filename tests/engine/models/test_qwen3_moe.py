"""Qwen3-MoE (engine/models/qwen3_moe.py): the Qwen3 decoder with mixture-of-experts MLPs, parsed,
built, loaded from per-expert hub tensors and run against transformers on a tiny checkpoint."""

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file

from engine import LLM, SamplingParams
from engine.checkpoint import load_model_config
from engine.checkpoint.moe_config import MoEConfig
from engine.kv.specs import FullAttentionSpec
from engine.layers.mlp import GatedMLP
from engine.layers.moe import MoE, routing_statistics
from engine.models import registry
from engine.models.qwen3_moe import QWEN3_MOE, parse_qwen3_moe_config
from tests.support.oracle import assert_matches_transformers


@pytest.fixture(scope="module")
def tiny_qwen3_moe(tiny_models):
    return tiny_models["qwen3_moe"]


def _raw(model_dir, **changes) -> dict:
    raw = json.loads((model_dir / "config.json").read_text())
    return {**raw, **changes}


def test_qwen3_moe_is_served_by_its_module(tiny_qwen3_moe):
    cfg = load_model_config(tiny_qwen3_moe)
    assert registry.get_architecture("Qwen3MoeForCausalLM") is QWEN3_MOE
    assert cfg.qk_norm and cfg.intermediate_size == 128  # the dense layer's width
    assert cfg.moe == MoEConfig(
        num_experts=8, top_k=2, intermediate_size=32, moe_layers=(False, True), renormalize=True
    )
    specs = registry.kv_cache_specs(cfg, block_size=16, dtype="float32")
    assert specs == [FullAttentionSpec(block_size=16, dtype="float32", num_kv_heads=2, head_dim=16)] * 2


def test_sparse_layers_follow_mlp_only_layers_and_the_sparse_step(tiny_qwen3_moe):
    def moe_layers(**changes):
        raw = _raw(tiny_qwen3_moe, num_hidden_layers=4, **changes)
        return parse_qwen3_moe_config(raw, "Qwen3MoeForCausalLM").moe.moe_layers

    assert moe_layers(mlp_only_layers=[]) == (True, True, True, True)
    assert moe_layers(mlp_only_layers=[0, 3]) == (False, True, True, False)
    assert moe_layers(mlp_only_layers=[], decoder_sparse_step=2) == (False, True, False, True)
    hub_style = _raw(tiny_qwen3_moe, num_experts=8)  # hub configs name it num_experts
    del hub_style["num_local_experts"]
    assert parse_qwen3_moe_config(hub_style, "Qwen3MoeForCausalLM").moe.num_experts == 8


@pytest.mark.parametrize("norm_topk_prob", [True, False])
def test_qwen3_moe_matches_transformers(tiny_qwen3_moe, tmp_path, norm_topk_prob):
    path = shutil.copytree(tiny_qwen3_moe, tmp_path / "ckpt")
    (path / "config.json").write_text(json.dumps(_raw(path, norm_topk_prob=norm_topk_prob)))
    llm = assert_matches_transformers(path)
    model = llm.engine.runner.model
    assert isinstance(model.layers[0].mlp, GatedMLP) and isinstance(model.layers[1].mlp, MoE)
    counts = routing_statistics(model)
    assert list(counts) == ["layers.1.mlp"] and sum(counts["layers.1.mlp"]) > 0


def _built(model_dir):
    cfg = load_model_config(model_dir)
    return registry.model_class(cfg)(cfg, torch.float32, torch.device("cpu"), 64)


def test_a_missing_or_stray_expert_tensor_is_named(tiny_qwen3_moe):
    tensors = load_file(str(tiny_qwen3_moe / "model.safetensors"))
    missing = {k: v for k, v in tensors.items() if k != "model.layers.1.mlp.experts.3.up_proj.weight"}
    with pytest.raises(ValueError, match=r"lacks 1 tensors, e.g. layers\.1\.mlp\.experts\.3\.up_proj$"):
        _built(tiny_qwen3_moe).load_weights(missing.items())
    for stray, match in (
        ("model.layers.0.mlp.experts.0.gate_proj.weight", "unexpected tensor"),  # layer 0 is dense
        ("model.layers.1.mlp.experts.8.gate_proj.weight", "expert 8 is out of range"),
        ("model.layers.1.mlp.experts.0.fc.weight", "unexpected tensor"),
    ):
        extra = {**tensors, stray: torch.zeros(32, 64)}
        with pytest.raises(ValueError, match=match) as info:
            _built(tiny_qwen3_moe).load_weights(extra.items())
        assert stray in str(info.value)


def test_the_engine_counts_every_computed_token_per_expert(tiny_qwen3_moe):
    prompts = [[5, 6, 7, 8, 9], list(range(10, 40))]
    params = SamplingParams(max_tokens=4, temperature=0.0, ignore_eos=True)
    llm = LLM(tiny_qwen3_moe, device="cpu", dtype="float32", enable_prefix_caching=False)
    assert llm.engine.routing_statistics() == {"layers.1.mlp": [0] * 8}
    llm.generate(prompts, params)
    (counts,) = llm.engine.routing_statistics().values()
    computed = sum(len(p) + params.max_tokens - 1 for p in prompts)  # the last token is never fed
    assert sum(counts) == 2 * computed  # top-2
    assert set(llm.stats().expert_tokens) == {"layers.1.mlp"}  # what /metrics exports (refreshed each second)
