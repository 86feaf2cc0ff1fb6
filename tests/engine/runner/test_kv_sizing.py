"""KV sizing from the model's per-layer specs: bytes per block on one rank, and blocks that fit."""

import pytest
import torch

from engine.checkpoint import load_model_config
from engine.config import CPU_MAX_DEFAULT_BLOCKS, EngineConfig
from engine.kv.specs import total_block_bytes
from engine.models.registry import kv_cache_specs
from engine.runner import kv_sizing
from engine.runner.kv_sizing import block_bytes, num_kv_blocks

CPU = torch.device("cpu")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_block_bytes_sum_the_layer_specs(tiny_llama, dtype):
    cfg = load_model_config(tiny_llama)  # 2 layers, 2 KV heads of 16 dims
    itemsize = torch.empty((), dtype=dtype).element_size()
    specs = kv_cache_specs(cfg, 16, str(dtype).removeprefix("torch."))
    assert block_bytes(cfg, 16, dtype) == total_block_bytes(specs) == 2 * 16 * (2 * 2 * 16 * itemsize)


def test_each_rank_holds_its_own_kv_heads(tiny_llama):
    cfg = load_model_config(tiny_llama)
    one = block_bytes(cfg, 16, torch.float32)
    assert block_bytes(cfg, 16, torch.float32, tp=2) == one // 2  # one KV head each
    assert block_bytes(cfg, 16, torch.float32, tp=4) == one // 2  # a replica of one KV head each
    assert {s.num_kv_heads for s in kv_cache_specs(cfg, 16, "float32", tp=4)} == {1}


def test_cpu_pool_is_capped_by_bytes_of_the_specs(tiny_llama, monkeypatch):
    cfg = load_model_config(tiny_llama)
    config = EngineConfig(tiny_llama, block_size=16, max_num_seqs=64)
    monkeypatch.setattr(kv_sizing, "CPU_MAX_KV_BYTES", 300 * block_bytes(cfg, 16, torch.float32) + 1)
    assert num_kv_blocks(config, cfg, 1024, CPU, torch.float32) == 300
    monkeypatch.setattr(kv_sizing, "CPU_MAX_KV_BYTES", 1 << 40)
    assert num_kv_blocks(config, cfg, 1024, CPU, torch.float32) == CPU_MAX_DEFAULT_BLOCKS


def test_explicit_block_count_must_hold_one_sequence(tiny_llama):
    cfg = load_model_config(tiny_llama)
    assert num_kv_blocks(EngineConfig(tiny_llama, num_gpu_blocks=64), cfg, 1024, CPU, torch.float32) == 64
    with pytest.raises(ValueError, match="cannot hold one sequence"):
        num_kv_blocks(EngineConfig(tiny_llama, num_gpu_blocks=63), cfg, 1024, CPU, torch.float32)
