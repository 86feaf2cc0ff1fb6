"""One validated configuration object for an engine instance, passed explicitly everywhere."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

DEVICES = ("auto", "cpu", "cuda", "npu")
DTYPES = ("auto", "float32", "bfloat16", "float16")
# "dummy" fills weights with seeded random values instead of reading safetensors: benchmarks of real
# architectures need no weight files, and weight values do not change speed at fixed output lengths.
LOAD_FORMATS = ("auto", "dummy")
# Without a memory probe on CPU we size the pool for every sequence at full length, capped so a
# careless max_model_len cannot allocate gigabytes of host memory.
CPU_MAX_DEFAULT_BLOCKS = 4096


@dataclass
class EngineConfig:
    model_dir: str | Path
    device: str = "auto"
    dtype: str = "auto"
    block_size: int = 16
    max_num_batched_tokens: int = 2048
    max_num_seqs: int = 64
    max_model_len: int | None = None  # None: the checkpoint's max_position_embeddings
    enable_prefix_caching: bool = True
    num_gpu_blocks: int | None = None  # None: sized from memory (see engine.runner.kv_sizing)
    gpu_memory_utilization: float = 0.9
    seed: int = 0
    tensor_parallel_size: int = 1
    kv_event_capacity: int = 10_000
    load_format: str = "auto"
    enforce_eager: bool = False  # CUDA: True skips capturing decode steps as CUDA graphs
    warm_up: bool = True  # CUDA: compile every step shape's kernels at start (engine/core/warm_up.py)
    # Schedule and launch step N+1 before reading step N's samples (overlaps host work with the
    # GPU). None: on for CUDA, off elsewhere (where there is no device queue to overlap with).
    async_scheduling: bool | None = None

    def __post_init__(self) -> None:
        self.model_dir = Path(self.model_dir)
        if self.device not in DEVICES:
            raise ValueError(f"device must be one of {', '.join(DEVICES)}, got {self.device!r}")
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {self.dtype!r}")
        if self.load_format not in LOAD_FORMATS:
            raise ValueError(
                f"load_format must be one of {', '.join(LOAD_FORMATS)}, got {self.load_format!r}"
            )
        _require_positive("block_size", self.block_size)
        _require_positive("max_num_batched_tokens", self.max_num_batched_tokens)
        _require_positive("max_num_seqs", self.max_num_seqs)
        _require_positive("kv_event_capacity", self.kv_event_capacity)
        if self.max_model_len is not None:
            _require_positive("max_model_len", self.max_model_len)
        if self.num_gpu_blocks is not None:
            _require_positive("num_gpu_blocks", self.num_gpu_blocks)
        if not 0.0 < self.gpu_memory_utilization <= 1.0:
            raise ValueError(f"gpu_memory_utilization must be in (0, 1], got {self.gpu_memory_utilization}")
        # Whether the model splits this many ways (heads, MLP rows) is checked when it loads.
        _require_positive("tensor_parallel_size", self.tensor_parallel_size)
        if not isinstance(self.seed, int):
            raise ValueError(f"seed must be an integer, got {self.seed!r}")
        if self.async_scheduling is not None and not isinstance(self.async_scheduling, bool):
            raise ValueError(f"async_scheduling must be true, false or None, got {self.async_scheduling!r}")

    def resolved_async_scheduling(self, device_type: str) -> bool:
        if self.async_scheduling is None:
            return device_type == "cuda"
        return self.async_scheduling

    def resolved_device(self) -> str:
        """'auto' becomes cuda when a CUDA device is visible, npu when torch_npu is, else cpu."""
        if self.device != "auto":
            return self.device
        import torch

        if torch.cuda.is_available():
            return "cuda"
        if hasattr(torch, "npu") and torch.npu.is_available():  # pragma: no cover - needs Ascend
            return "npu"
        return "cpu"


def _require_positive(name: str, value: object) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
