"""A random-weight checkpoint of a real architecture's shape (the tiny Llama here) loads in the engine."""

import json

import torch
from safetensors import safe_open

from engine.bench.random_arch import hf_config, llama_weight_shapes, write_random_checkpoint
from engine.checkpoint.model_config import load_model_config
from engine.models.loader import load_model
from engine.tokenizer.tokenizer import Tokenizer


def test_random_checkpoint_is_sharded_complete_and_loads(tmp_path):
    out = write_random_checkpoint("tiny-llama", tmp_path / "m", shard_bytes=1 << 20)

    index = json.loads((out / "model.safetensors.index.json").read_text())
    shards = sorted(set(index["weight_map"].values()))
    assert len(shards) > 1 and all((out / shard).is_file() for shard in shards)
    assert set(index["weight_map"]) == set(llama_weight_shapes(hf_config("tiny-llama")))
    # load_weights refuses a checkpoint with a missing or unexpected tensor
    model = load_model(out, load_model_config(out), torch.float32, torch.device("cpu"), 64)
    with safe_open(str(out / index["weight_map"]["model.embed_tokens.weight"]), framework="pt") as f:
        written = f.get_tensor("model.embed_tokens.weight")
    assert torch.equal(dict(model.named_parameters())["embed_tokens.weight"], written)
    assert 0.015 < written.std().item() < 0.025
    tokenizer = Tokenizer(out)
    assert tokenizer.encode_chat([{"role": "user", "content": "t5 t6"}]) == [5, 6]
