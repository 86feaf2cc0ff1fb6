"""Which accelerator runtime this process can drive, decided in one place.

Ascend NPUs need ``torch_npu`` (the ``ascend`` extra, over Huawei's CANN toolkit): importing it
registers the ``npu`` device and the HCCL backend with torch. Nothing else imports it; an NPU is
chosen only when that import works and the runtime sees a device, and asking for one that is not
there is a ``DeviceUnavailable`` naming what is missing, at start, instead of a crash deep in torch.
"""

from __future__ import annotations

import importlib
from types import ModuleType

ASCEND_EXTRA = "pip install 'chassis[ascend]' over Huawei's CANN toolkit"


class DeviceUnavailable(RuntimeError):
    """The device asked for cannot be driven by this process; the message says why."""


def npu_runtime() -> tuple[ModuleType | None, str | None]:
    """(``torch_npu``, None) when it imports, else (None, why not)."""
    try:
        return importlib.import_module("torch_npu"), None
    except ImportError as exc:
        return None, f"torch_npu is not importable ({exc}); install it with {ASCEND_EXTRA}"


def npu_device_count() -> int:
    """NPUs the runtime sees (0 without the runtime)."""
    module, _ = npu_runtime()
    if module is None:
        return 0
    import torch

    return torch.npu.device_count() if torch.npu.is_available() else 0


def resolve_device(device: str) -> str:
    """``auto``: cuda when a CUDA device is visible, else npu when the NPU runtime sees one, else cpu.
    An explicit cuda or npu must be usable here, or DeviceUnavailable says what is missing."""
    import torch

    if device == "auto":
        if torch.cuda.is_available():
            return "cuda"
        return "npu" if npu_device_count() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise DeviceUnavailable("device cuda: torch sees no CUDA device (driver, CUDA_VISIBLE_DEVICES)")
    if device == "npu":
        module, why = npu_runtime()
        if module is None:
            raise DeviceUnavailable(f"device npu: {why}")
        if not torch.npu.is_available() or torch.npu.device_count() == 0:
            raise DeviceUnavailable("device npu: torch_npu sees no NPU (driver, ASCEND_RT_VISIBLE_DEVICES)")
    return device


def drivable_devices() -> list[str]:
    """The engine devices (``--device`` values) this host can run replicas on, as the node agent
    reports them: cpu always, cuda when torch sees a CUDA device, npu when torch_npu sees an NPU."""
    import torch

    devices = ["cpu"]
    if torch.cuda.is_available():
        devices.append("cuda")
    if npu_device_count():
        devices.append("npu")
    return devices
