"""Run the Triton kernels on CPU through Triton's interpreter when no GPU is present.

``TRITON_INTERPRET`` is read when ``@triton.jit`` decorates a kernel, so tests/conftest.py sets it
before any test module imports kernels/. On a CUDA machine it must stay unset so the same tests run
the compiled kernels.
"""

import importlib
import os

import pytest
import torch

HAS_CUDA = torch.cuda.is_available()

if not HAS_CUDA and os.environ.get("TRITON_INTERPRET") != "1":
    # tests/conftest.py sets it before anything imports kernels/; a run that bypasses it cannot be
    # fixed by reloading kernel modules here (modules import each other's kernels and classes, so a
    # reload leaves stale references behind), so it is refused plainly.
    raise pytest.UsageError("CPU kernel tests need TRITON_INTERPRET=1 before kernels/ is imported")

from kernels import _common, invariant_matmul_configs  # noqa: E402
from tests.support.launch_tables import table_at  # noqa: E402
from tests.support.row_invariant_dot import install_row_invariant_dot  # noqa: E402

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not HAS_CUDA, reason="needs CUDA"))]


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.fixture(params=DEVICES)
def device(request):
    return torch.device(request.param)


KERNEL_MODULES = [
    "kernels.rms_norm",
    "kernels.activation",
    "kernels.rotary",
    "kernels.kv_cache_write",
    "kernels.paged_attention",
    "kernels.paged_attention_decode",
    "kernels.rope_kv_write",
    "kernels.gemv",
    "kernels.gemv_norm",
    "kernels.fused_moe",
    "kernels.moe_align",
    "kernels.moe_routing",
    "kernels.mla_decode",
    "kernels.latent_cache_write",
    "kernels.head_gemv",
    "kernels.latent_rope_write",
    "kernels.invariant_matmul",
    "kernels.invariant_attention",
]


@pytest.fixture
def force_triton(request, monkeypatch):
    """Make the public ops take the Triton path, on CPU tensors too (interpreter).

    Every launcher is wrapped to count calls, so a test that silently fell back to the torch
    reference (and so compared the reference with itself) fails. On a CUDA machine the interpreter
    is off, so CPU-tensor variants are skipped there; their CUDA twins run instead.
    """
    if HAS_CUDA and "device" in request.fixturenames and request.getfixturevalue("device").type == "cpu":
        pytest.skip("Triton on CPU tensors needs the interpreter, which is off where CUDA exists")
    monkeypatch.setattr(_common._switch, "mode", "triton")
    launches = []
    for name in KERNEL_MODULES:
        module = importlib.import_module(name)
        original = module._launch

        def counted(*args, _original=original, **kwargs):
            launches.append(_original)
            return _original(*args, **kwargs)

        monkeypatch.setattr(module, "_launch", counted)
    yield
    assert launches, "the test never reached a Triton launcher"


@pytest.fixture
def force_torch(monkeypatch):
    monkeypatch.setattr(_common._switch, "mode", "torch")


@pytest.fixture
def row_invariant_dot(monkeypatch):
    """``tests/support/row_invariant_dot.py``: the interpreter's ``tl.dot`` one row at a time."""
    if not HAS_CUDA:
        install_row_invariant_dot(monkeypatch)


@pytest.fixture
def matmul_table(tmp_path, monkeypatch):
    """The invariant GEMM reading a tile table of the test's own, none of its entries verified yet."""
    monkeypatch.setattr(invariant_matmul_configs, "_verified", {})
    with table_at(invariant_matmul_configs, tmp_path / "invariant_matmul_table.json", monkeypatch) as path:
        yield path
