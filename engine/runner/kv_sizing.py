"""How many KV blocks to allocate when the config leaves ``num_gpu_blocks`` unset."""

from __future__ import annotations

import torch

from engine.checkpoint.model_config import ModelConfig
from engine.config import CPU_MAX_DEFAULT_BLOCKS, EngineConfig
from engine.kv.specs import total_block_bytes
from engine.models.registry import kv_cache_specs

# Headroom on CUDA for activations and the sampler, which are not profiled (yet).
CUDA_ACTIVATION_RESERVE_BYTES = 1 << 30
# Host memory is shared with everything else on the machine: never take more than this by default.
CPU_MAX_KV_BYTES = 4 << 30


def block_bytes(cfg: ModelConfig, block_size: int, dtype: torch.dtype, tp: int = 1) -> int:
    """Bytes of one KV block on one rank: the sum over the model's per-layer KV specs (each of ``tp``
    ranks holds its own KV heads)."""
    return total_block_bytes(kv_cache_specs(cfg, block_size, str(dtype).removeprefix("torch."), tp))


def num_kv_blocks(
    config: EngineConfig, cfg: ModelConfig, max_model_len: int, device: torch.device, dtype: torch.dtype
) -> int:
    min_blocks = -(-max_model_len // config.block_size)  # one full-length sequence must fit
    if config.num_gpu_blocks is not None:
        if config.num_gpu_blocks < min_blocks:
            raise ValueError(
                f"num_gpu_blocks={config.num_gpu_blocks} cannot hold one sequence of max_model_len="
                f"{max_model_len} ({min_blocks} blocks of {config.block_size} tokens); "
                f"raise num_gpu_blocks or lower max_model_len"
            )
        return config.num_gpu_blocks
    one_block = block_bytes(cfg, config.block_size, dtype, config.tensor_parallel_size)
    if device.type == "cuda":
        free, total = torch.cuda.mem_get_info(device)
        usable = free - total * (1.0 - config.gpu_memory_utilization) - CUDA_ACTIVATION_RESERVE_BYTES
        blocks = int(usable // one_block)
        if blocks < min_blocks:
            raise ValueError(
                f"only {max(blocks, 0)} KV blocks fit in GPU memory, {min_blocks} are needed for "
                f"max_model_len={max_model_len}; lower max_model_len or raise gpu_memory_utilization"
            )
        return blocks
    wanted = -(-config.max_num_seqs * max_model_len // config.block_size)
    by_bytes = CPU_MAX_KV_BYTES // one_block
    return max(min_blocks, min(wanted, CPU_MAX_DEFAULT_BLOCKS, by_bytes))
