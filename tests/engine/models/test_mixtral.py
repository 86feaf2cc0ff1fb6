"""Mixtral (engine/models/mixtral.py): the Mistral decoder with a mixture of experts on every layer,
loaded from its hub names (``block_sparse_moe.experts.<e>.w1/w3/w2``) and run against transformers."""

import pytest
import torch
from safetensors.torch import load_file

from engine.checkpoint import load_model_config
from engine.checkpoint.moe_config import MoEConfig
from engine.kv.specs import SlidingWindowSpec
from engine.layers.moe import MoE
from engine.models import registry
from engine.models.mixtral import MIXTRAL
from tests.support.oracle import assert_matches_transformers


@pytest.fixture(scope="module")
def tiny_mixtral(tiny_models):
    return tiny_models["mixtral"]


def test_mixtral_is_served_by_its_module(tiny_mixtral):
    cfg = load_model_config(tiny_mixtral)
    assert registry.get_architecture("MixtralForCausalLM") is MIXTRAL
    assert not cfg.qk_norm and cfg.sliding_windows == [24, 24]
    assert cfg.moe == MoEConfig(num_experts=8, top_k=2, intermediate_size=32, moe_layers=(True, True))
    specs = registry.kv_cache_specs(cfg, block_size=16, dtype="float32")
    window = SlidingWindowSpec(block_size=16, dtype="float32", num_kv_heads=2, head_dim=16, window=24)
    assert specs == [window] * 2


def test_mixtral_matches_transformers(tiny_mixtral):
    llm = assert_matches_transformers(tiny_mixtral, prompt_lengths=(6, 40))  # 40 > the window
    assert all(isinstance(layer.mlp, MoE) for layer in llm.engine.runner.model.layers)


def test_expert_weights_load_from_w1_w3_w2(tiny_mixtral):
    cfg = load_model_config(tiny_mixtral)
    model = registry.model_class(cfg)(cfg, torch.float32, torch.device("cpu"), 64)
    tensors = load_file(str(tiny_mixtral / "model.safetensors"))
    model.load_weights(tensors.items())
    experts = model.layers[1].mlp.experts
    expert = "model.layers.1.block_sparse_moe.experts.5."
    torch.testing.assert_close(experts.w13[5, :32], tensors[expert + "w1.weight"], rtol=0, atol=0)
    torch.testing.assert_close(experts.w13[5, 32:], tensors[expert + "w3.weight"], rtol=0, atol=0)
    torch.testing.assert_close(experts.w2[5], tensors[expert + "w2.weight"], rtol=0, atol=0)
    del tensors[expert + "w3.weight"]
    with pytest.raises(ValueError, match=r"lacks 1 tensors, e\.g\. layers\.1\.mlp\.experts\.5\.up_proj$"):
        model.load_weights(tensors.items())
