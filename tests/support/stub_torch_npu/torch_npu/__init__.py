"""A STUB of Huawei's torch_npu, for CPU tests only: no Ascend NPU or CANN runtime can exist on the
test machines. Importing it does what the real package does for device selection and nothing more:
it attaches a ``torch.npu`` namespace reporting ``STUB_NPU_COUNT`` devices (default 2)."""

import os
import types

import torch

STUB = True


def _count() -> int:
    return int(os.environ.get("STUB_NPU_COUNT", "2"))


torch.npu = types.SimpleNamespace(
    is_available=lambda: _count() > 0,
    device_count=_count,
    set_device=lambda index: None,
)
