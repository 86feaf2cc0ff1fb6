"""Build the executor an engine config asks for: one device, or tensor parallel over several."""

from __future__ import annotations

import torch

from engine.checkpoint.model_config import ModelConfig
from engine.config import EngineConfig
from engine.distributed.expert_balancer import ExpertBalancerSettings
from engine.executor.protocol import Executor
from engine.executor.single_device import SingleDeviceExecutor
from engine.executor.tensor_parallel import TensorParallelExecutor


def runner_kwargs(
    config: EngineConfig,
    model_config: ModelConfig,
    device: torch.device,
    dtype: torch.dtype,
    max_model_len: int,
) -> dict:
    """``ModelRunner``'s arguments, as every rank builds its runner from them (picklable)."""
    return dict(
        model_dir=config.model_dir,
        cfg=model_config,
        device=device,
        dtype=dtype,
        block_size=config.block_size,
        max_model_len=max_model_len,
        load_format=config.load_format,
        gguf_weights=config.gguf_weights,
        seed=config.seed,
        expert_parallel=config.expert_parallel_size > 1,
        expert_balancer=ExpertBalancerSettings.of(config),
    )


def make_executor(
    config: EngineConfig,
    model_config: ModelConfig,
    device: torch.device,
    dtype: torch.dtype,
    max_model_len: int,
) -> Executor:
    """The model loaded on ``device`` (rank 0's device under tensor parallelism), KV cache not yet
    allocated."""
    kwargs = runner_kwargs(config, model_config, device, dtype, max_model_len)
    if config.world_size == 1:
        return SingleDeviceExecutor(**kwargs)
    return TensorParallelExecutor(config.world_size, kwargs)
