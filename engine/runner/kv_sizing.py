"""How many KV blocks to allocate (each pool's, engine/kv/layout.py) when the config leaves
``num_gpu_blocks`` unset."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from engine.checkpoint.model_config import ModelConfig
from engine.config import CPU_MAX_DEFAULT_BLOCKS, EngineConfig
from engine.kv.layout import KVLayout
from engine.kv.specs import total_block_bytes
from engine.models.registry import kv_cache_specs
from kernels.cpu_invariant import KEY_BLOCK as INVARIANT_KEY_BLOCK

# Headroom on CUDA for activations and the sampler, which are not profiled (yet).
CUDA_ACTIVATION_RESERVE_BYTES = 1 << 30
# Host memory is shared with everything else on the machine: never take more than this by default.
CPU_MAX_KV_BYTES = 4 << 30


def block_bytes(cfg: ModelConfig, block_size: int, dtype: torch.dtype, tp: int = 1) -> int:
    """Bytes of one KV block on one rank: the sum over the model's per-layer KV specs (each of ``tp``
    ranks holds its own KV heads)."""
    return total_block_bytes(kv_cache_specs(cfg, block_size, str(dtype).removeprefix("torch."), tp))


def kv_layout(config: EngineConfig, cfg: ModelConfig, dtype: torch.dtype) -> KVLayout:
    """The KV groups of this model under ``config.sliding_window_kv``. An expert-parallel replica's
    ranks keep whole contexts (their pools have no window group yet)."""
    specs = kv_cache_specs(
        cfg, config.block_size, str(dtype).removeprefix("torch."), config.tensor_parallel_size
    )
    mode = "full-context" if config.expert_parallel_size > 1 else config.sliding_window_kv
    # Batch-invariant attention walks keys in tiles aligned to the positions it sees: 256 on CPU,
    # 64 (a divisor) in the Triton kernels.
    alignment = INVARIANT_KEY_BLOCK if config.batch_invariant else 0
    return KVLayout.from_specs(specs, mode, config.swa_replay_margin, alignment)


@dataclass(frozen=True)
class KVPoolSizes:
    num_blocks: int  # the main pool (the only one unless a window group sits beside full attention)
    num_window_blocks: int = 0  # the window group's own pool


def num_kv_blocks(
    config: EngineConfig, cfg: ModelConfig, max_model_len: int, device: torch.device, dtype: torch.dtype
) -> int:
    return kv_pool_sizes(config, cfg, max_model_len, device, dtype).num_blocks


def kv_pool_sizes(
    config: EngineConfig, cfg: ModelConfig, max_model_len: int, device: torch.device, dtype: torch.dtype
) -> KVPoolSizes:
    """Blocks of each pool. A window group beside full-attention layers gets what its running
    requests can hold at most (``KVLayout.window_blocks_bound``), never more blocks than the main
    pool; the memory it leaves goes to the main pool."""
    layout = kv_layout(config, cfg, dtype)
    specs = kv_cache_specs(
        cfg, config.block_size, str(dtype).removeprefix("torch."), config.tensor_parallel_size
    )
    if layout.hybrid:
        main_bytes = total_block_bytes([specs[i] for i in layout.main_layers])
        window_bytes = total_block_bytes([specs[i] for i in layout.window_layers])
        bound = layout.window_blocks_bound(config.max_num_seqs, config.max_num_batched_tokens)
    else:
        main_bytes, window_bytes, bound = total_block_bytes(specs), 0, 0
    min_blocks = -(-max_model_len // config.block_size)  # one full-length sequence must fit
    if layout.all_windowed:  # one sequence holds only its window
        min_blocks = min(min_blocks, layout.window_blocks_bound(1, config.max_num_batched_tokens))
    if config.num_gpu_blocks is not None:
        if config.num_gpu_blocks < min_blocks:
            raise ValueError(
                f"num_gpu_blocks={config.num_gpu_blocks} cannot hold one sequence of max_model_len="
                f"{max_model_len} ({min_blocks} blocks of {config.block_size} tokens); "
                f"raise num_gpu_blocks or lower max_model_len"
            )
        return KVPoolSizes(config.num_gpu_blocks, min(config.num_gpu_blocks, bound))
    if device.type == "cuda":
        free, total = torch.cuda.mem_get_info(device)
        usable = free - total * (1.0 - config.gpu_memory_utilization) - CUDA_ACTIVATION_RESERVE_BYTES
        window = min(bound, int(usable // (main_bytes + window_bytes))) if bound else 0
        blocks = int((usable - window * window_bytes) // main_bytes)
        if blocks < min_blocks:
            raise ValueError(
                f"only {max(blocks, 0)} KV blocks fit in GPU memory, {min_blocks} are needed for "
                f"max_model_len={max_model_len}; lower max_model_len or raise gpu_memory_utilization"
            )
        return KVPoolSizes(blocks, window)
    wanted = -(-config.max_num_seqs * max_model_len // config.block_size)
    if layout.all_windowed:
        wanted = min(wanted, layout.window_blocks_bound(config.max_num_seqs, config.max_num_batched_tokens))
    window = min(bound, wanted)
    by_bytes = (CPU_MAX_KV_BYTES - window * window_bytes) // main_bytes
    return KVPoolSizes(max(min_blocks, min(wanted, CPU_MAX_DEFAULT_BLOCKS, by_bytes)), window)
