import subprocess
import sys
from pathlib import Path

import pytest
import torch

from kernels import _common
from kernels._common import kernels_mode, next_power_of_2, set_mode, use_triton

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("n", "expected"), [(0, 1), (1, 1), (2, 2), (3, 4), (64, 64), (131, 256)])
def test_next_power_of_2(n, expected):
    assert next_power_of_2(n) == expected


def test_dispatch_modes(monkeypatch):
    cpu = torch.zeros(1)
    monkeypatch.setattr(_common._switch, "mode", "auto")
    assert use_triton(cpu) is False
    assert set_mode("triton") == "auto"
    assert kernels_mode() == "triton" and use_triton(cpu) is True
    set_mode("torch")
    assert use_triton(cpu) is False
    with pytest.raises(ValueError, match="kernels mode 'cuda' is not one of auto, torch, triton"):
        set_mode("cuda")
    assert kernels_mode() == "torch"


def test_ops_import_and_run_without_triton():
    """Ascend hosts have no Triton: every op must import and fall back to its torch reference."""
    code = (
        "import sys; sys.modules['triton'] = None\n"
        "import torch\n"
        "from kernels._common import HAS_TRITON, use_triton\n"
        "from kernels.rms_norm import rms_norm\n"
        "from kernels.activation import silu_and_mul\n"
        "from kernels.rotary import rotary_embedding, build_cos_sin_cache\n"
        "from kernels.kv_cache_write import write_kv_cache\n"
        "from kernels.rope_kv_write import rope_and_write_kv\n"
        "from kernels.gemv import gemv, gemv_silu\n"
        "import engine.layers.linear\n"
        "from kernels.paged_attention import paged_attention, paged_attention_decode\n"
        "assert not HAS_TRITON and not use_triton(torch.zeros(1))\n"
        "print(rms_norm(torch.ones(2, 8), torch.ones(8), 1e-6).sum().item())\n"
    )
    env = {"PYTHONPATH": str(REPO_ROOT), "PATH": "/usr/bin:/bin"}
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO_ROOT, env=env, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    assert float(result.stdout) == pytest.approx(16.0, rel=1e-4)


def test_launch_overlap_needs_a_hopper_gpu_and_can_be_switched_off(monkeypatch):
    """Programmatic dependent launch only where the GPU has it (never on CPU tensors, never under
    the interpreter); the constexpr that makes a kernel wait comes with every launch attribute."""
    assert _common.launch_overlap(torch.device("cpu"), 1) == {"USE_PDL": False}
    assert _common.set_launch_overlap_mode("off") == "auto"
    assert _common.launch_overlap(torch.device("cpu"), 1) == {"USE_PDL": False}
    with pytest.raises(ValueError, match="launch_overlap mode 'on' is not one of auto, off"):
        _common.set_launch_overlap_mode("on")
    _common.set_launch_overlap_mode("auto")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_launch_overlap_on_a_cuda_gpu():
    major = torch.cuda.get_device_capability()[0]
    cuda = torch.device("cuda")
    options = _common.launch_overlap(cuda, 1)
    if _common.interpreting() or major < 9:
        assert options == {"USE_PDL": False}
    else:
        assert options == {"USE_PDL": True, "launch_pdl": True}
    # A prefill or a large decode batch launches as before.
    assert _common.launch_overlap(cuda, _common.LAUNCH_OVERLAP_MAX_ROWS + 1) == {"USE_PDL": False}
