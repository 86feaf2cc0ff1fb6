"""Issue 16's MLA capacity goal: for the DeepSeek-V2-Lite shape the KV pool holds at least 8x the
tokens of an uncompressed per-head K/V layout in the same memory; ``chassis bench kv-capacity``
prints both."""

import json

from chassis.main import main
from engine.bench.kv_capacity import GIB, kv_capacity
from engine.bench.random_arch import hf_config
from engine.checkpoint.model_config import parse_model_config


def test_mla_latents_hold_at_least_8x_the_tokens_of_per_head_kv():
    capacity = kv_capacity(parse_model_config(hf_config("deepseek-v2-lite")), "bfloat16")
    # 27 layers; latent 512 + rope 64 per token, vs K 16 x (128 + 64) and V 16 x 128 per token.
    assert capacity.bytes_per_token == 27 * (512 + 64) * 2
    assert capacity.per_head_bytes_per_token == 27 * 16 * (192 + 128) * 2
    assert capacity.tokens_per_gib == GIB // (27 * 576 * 2)
    assert capacity.ratio >= 8


def test_the_latent_is_replicated_while_heads_split_over_ranks():
    cfg = parse_model_config(hf_config("deepseek-v2-lite"))
    one, two = kv_capacity(cfg, tp=1), kv_capacity(cfg, tp=2)
    assert two.bytes_per_token == one.bytes_per_token
    assert two.per_head_bytes_per_token * 2 == one.per_head_bytes_per_token


def test_a_per_head_model_is_its_own_per_head_layout():
    capacity = kv_capacity(parse_model_config(hf_config("llama-3.1-8b")), "bfloat16")
    assert capacity.bytes_per_token == capacity.per_head_bytes_per_token == 32 * 2 * 8 * 128 * 2
    assert capacity.ratio == 1.0


def test_the_cli_prints_both_layouts_and_their_ratio(capsys, tmp_path):
    out = tmp_path / "capacity.json"
    assert main(["bench", "kv-capacity", "--random-arch", "deepseek-v2-lite", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "34,521 tokens/GiB" in printed  # 2**30 // 31,104 bytes
    assert "3,883 tokens/GiB" in printed  # 2**30 // 276,480 bytes
    assert "8.89x" in printed
    figures = json.loads(out.read_text())
    assert figures["tokens_per_gib"] == 34_521 and figures["per_head_tokens_per_gib"] == 3_883


def test_the_cli_reads_a_checkpoint_directory(tiny_models, capsys):
    assert (
        main(["bench", "kv-capacity", "--model", str(tiny_models["deepseek_v3"]), "--dtype", "float32"]) == 0
    )
    assert "DeepseekV3ForCausalLM" in capsys.readouterr().out
