"""Host-to-device copies of step inputs that never make the host wait for the GPU.

A ``non_blocking`` copy from ordinary (pageable) host memory is staged by the driver, which may
first synchronize with the stream: the host then waits for the step in flight, and the overlap
of async scheduling is lost. Staging through torch's pinned-memory caching allocator keeps the copy
asynchronous; the allocator records the copy on the stream and reuses the block only after it ran.
"""

from __future__ import annotations

import numpy as np
import torch


def pinned(array: np.ndarray | list, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """A host tensor holding ``array`` that can be copied to ``device`` asynchronously."""
    host = torch.as_tensor(np.ascontiguousarray(array)).to(dtype)
    return host.pin_memory() if device.type == "cuda" else host


def to_device(array: np.ndarray | list, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    return pinned(array, dtype, device).to(device, non_blocking=True)


def copy_to(dst: torch.Tensor, array: np.ndarray) -> None:
    """``dst[...] = array`` (same shape) without waiting for the device."""
    dst.copy_(pinned(array, dst.dtype, dst.device), non_blocking=True)
