"""Checkpoint directories: shards, dtypes, inspection, and clear errors for broken ones."""

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from engine import LLM, SamplingParams
from engine.checkpoint import CheckpointError, load_model_config
from engine.checkpoint.inspect import inspect_checkpoint
from engine.testing.tiny_deepseek import DEEPSEEK_ARCHES, KV_LORA_RANK, QK_ROPE_HEAD_DIM
from engine.testing.tiny_model import make_tiny_model

GREEDY = SamplingParams(max_tokens=8, temperature=0.0, ignore_eos=True)
PROMPT = [5, 17, 42, 99, 7, 3, 250]


@pytest.fixture
def broken(tiny_qwen3, tmp_path):
    """A private copy of the qwen3 checkpoint that a test may damage."""
    return shutil.copytree(tiny_qwen3, tmp_path / "ckpt")


def test_sharded_checkpoint_loads_like_the_single_file(tiny_qwen3, tmp_path):
    sharded = make_tiny_model(tmp_path / "sharded", arch="qwen3", seed=4, num_shards=3)
    assert len(list(sharded.glob("model-*.safetensors"))) == 3
    assert inspect_checkpoint(sharded).num_weight_files == 3
    (a,) = LLM(tiny_qwen3).generate([PROMPT], GREEDY)
    (b,) = LLM(sharded).generate([PROMPT], GREEDY)
    assert a.token_ids == b.token_ids


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_half_precision_checkpoints_load(tmp_path, dtype):
    path = make_tiny_model(tmp_path / dtype, arch="qwen2", seed=3, dtype=dtype)
    assert load_model_config(path).dtype == dtype
    llm = LLM(path, dtype="auto")
    assert llm.engine.dtype == getattr(torch, dtype)
    (out,) = llm.generate([PROMPT], GREEDY)
    assert len(out.token_ids) == 8
    (up,) = LLM(path, dtype="float32").generate([PROMPT], GREEDY)  # upcast on load also works
    assert len(up.token_ids) == 8


def test_inspect_reports_cheap_facts(tiny_models):
    from transformers import AutoModelForCausalLM

    for arch, path in tiny_models.items():
        info = inspect_checkpoint(path)
        hf = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
        held_apart = 0  # tensors of the files that transformers does not hold as parameters
        if arch == "deepseek_v3":  # the MTP layer (skipped there) and the router bias (a buffer)
            held_apart = sum(
                t.numel()
                for n, t in load_file(str(path / "model.safetensors")).items()
                if n.startswith("model.layers.2.") or n.endswith("e_score_correction_bias")
            )
        assert info.num_parameters == sum(p.numel() for p in hf.parameters()) + held_apart, arch
        if arch in DEEPSEEK_ARCHES:  # one latent + rope part per token, 2 layers, fp32
            assert info.kv_bytes_per_token == 2 * (KV_LORA_RANK + QK_ROPE_HEAD_DIM) * 4
        else:  # K+V, every layer (2, Gemma's 4 and 6), 2 kv heads, dim 16, fp32
            assert info.kv_bytes_per_token == 2 * hf.config.num_hidden_layers * 2 * 16 * 4
        assert info.has_tokenizer and info.has_chat_template
        assert info.size_bytes > info.num_parameters * 4 * 0.99
    assert inspect_checkpoint(tiny_models["qwen3"]).to_dict()["architecture"] == "Qwen3ForCausalLM"


def test_model_config_flags(tiny_models):
    assert load_model_config(tiny_models["qwen2"]).qkv_bias
    assert load_model_config(tiny_models["qwen3"]).qk_norm
    assert load_model_config(tiny_models["qwen3"]).tie_word_embeddings
    assert load_model_config(tiny_models["mistral"]).sliding_windows == [24, 24]
    assert load_model_config(tiny_models["llama"]).rope_scaling["rope_type"] == "llama3"
    assert len(load_model_config(tiny_models["llama"]).eos_token_ids) == 2


def _expect(path, fragment, match):
    with pytest.raises(CheckpointError, match=match) as info:
        LLM(path)
    assert fragment in str(info.value)
    return info.value


def test_missing_config(broken):
    (broken / "config.json").unlink()
    _expect(broken, "config.json", "file is missing")


def test_garbled_config(broken):
    (broken / "config.json").write_text("{not json")
    _expect(broken, "config.json", "not valid JSON")


def test_unknown_architecture(broken):
    cfg = json.loads((broken / "config.json").read_text())
    cfg["architectures"] = ["GPT2LMHeadModel"]
    (broken / "config.json").write_text(json.dumps(cfg))
    _expect(broken, "config.json", "unsupported architecture 'GPT2LMHeadModel'")


def test_config_with_bad_field(broken):
    cfg = json.loads((broken / "config.json").read_text())
    del cfg["hidden_size"]
    (broken / "config.json").write_text(json.dumps(cfg))
    _expect(broken, "config.json", "hidden_size")


def test_missing_shard(tmp_path):
    path = make_tiny_model(tmp_path / "sharded", arch="qwen3", num_shards=2)
    (path / "model-00002-of-00002.safetensors").unlink()
    _expect(path, "model.safetensors.index.json", "model-00002-of-00002.safetensors")
    with pytest.raises(CheckpointError, match="missing"):
        inspect_checkpoint(path)


def test_no_weights(broken):
    (broken / "model.safetensors").unlink()
    _expect(broken, "ckpt", "no \\*.safetensors")


def test_corrupt_weights_file(broken):
    (broken / "model.safetensors").write_bytes(b"\x00garbage")
    _expect(broken, "model.safetensors", "cannot read")


def test_missing_tensor(broken):
    tensors = load_file(broken / "model.safetensors")
    del tensors["model.layers.1.mlp.up_proj.weight"]
    save_file(tensors, broken / "model.safetensors")
    _expect(broken, "ckpt", "lacks 1 tensors")


def test_wrong_tensor_shape(broken):
    tensors = load_file(broken / "model.safetensors")
    tensors["model.norm.weight"] = torch.ones(3)
    save_file(tensors, broken / "model.safetensors")
    _expect(broken, "ckpt", "model.norm.weight")


def test_missing_tokenizer(broken):
    (broken / "tokenizer.json").unlink()
    (broken / "tokenizer_config.json").unlink()
    _expect(broken, "tokenizer.json", "missing")


def test_not_a_directory(tmp_path):
    _expect(tmp_path / "nope", "nope", "not a directory")
