"""Device selection with the Ascend runtime absent and present. The "present" case imports a STUB
torch_npu (tests/support/stub_torch_npu): no NPU or CANN runtime can exist on the test machines."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from engine.device_runtime import DeviceUnavailable, drivable_devices, npu_device_count, resolve_device

STUB_DIR = Path(__file__).resolve().parents[1] / "support" / "stub_torch_npu"
NO_NPU = "cuda" if torch.cuda.is_available() else "cpu"  # what auto means here without an NPU


@pytest.fixture
def runtime_absent(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch_npu", None)  # `import torch_npu` raises ImportError


@pytest.fixture
def stub_runtime(monkeypatch):
    monkeypatch.delitem(sys.modules, "torch_npu", raising=False)
    monkeypatch.syspath_prepend(str(STUB_DIR))
    had_npu = hasattr(torch, "npu")
    yield monkeypatch
    sys.modules.pop("torch_npu", None)
    if not had_npu and hasattr(torch, "npu"):
        del torch.npu


def test_without_the_runtime_auto_never_picks_npu_and_npu_says_what_to_install(runtime_absent):
    assert resolve_device("auto") == NO_NPU
    assert npu_device_count() == 0
    with pytest.raises(DeviceUnavailable, match=r"torch_npu is not importable .*chassis\[ascend\]"):
        resolve_device("npu")


@pytest.mark.skipif(torch.cuda.is_available(), reason="auto prefers CUDA when a GPU is visible")
def test_with_the_runtime_and_a_device_auto_picks_npu(stub_runtime):
    import torch_npu

    assert torch_npu.STUB  # the stub, never the real package
    assert npu_device_count() == 2
    assert resolve_device("auto") == "npu"
    assert resolve_device("npu") == "npu"


def test_with_the_runtime_but_no_device_npu_is_refused(stub_runtime):
    stub_runtime.setenv("STUB_NPU_COUNT", "0")
    assert resolve_device("auto") == NO_NPU
    with pytest.raises(DeviceUnavailable, match="torch_npu sees no NPU"):
        resolve_device("npu")


def test_cpu_is_always_usable(runtime_absent):
    assert resolve_device("cpu") == "cpu"


def test_serve_refuses_an_npu_it_cannot_drive_before_loading(tiny_checkpoint):
    result = subprocess.run(
        [sys.executable, "-m", "chassis", "serve", str(tiny_checkpoint), "--device", "npu"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 2
    assert "device npu: torch_npu is not importable" in result.stderr
    assert "Traceback" not in result.stderr


def test_drivable_devices_without_the_runtime_leave_npu_out(runtime_absent):
    assert "npu" not in drivable_devices()
    assert drivable_devices()[0] == "cpu"


def test_drivable_devices_with_the_stub_runtime_include_npu_only_when_it_sees_a_device(stub_runtime):
    assert "npu" in drivable_devices()
    import torch_npu

    assert torch_npu.STUB  # the stub, never the real package
    stub_runtime.setenv("STUB_NPU_COUNT", "0")
    assert "npu" not in drivable_devices()
