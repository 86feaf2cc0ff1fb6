"""Helpers shared by every kernel file: Triton import guard, dispatch rule, block sizes.

Triton is imported here and nowhere else, so ``import kernels.<op>`` works on machines without it
(Ascend NPU hosts). Without Triton, ``triton.jit`` is an identity decorator and ``tl.constexpr`` a
placeholder: the kernel functions still get defined, but ``use_triton`` never lets them launch.
"""

from __future__ import annotations

import functools
import os
from types import SimpleNamespace

import torch

from kernels.mode_switch import ModeSwitch

try:
    import triton
    import triton.language as tl

    HAS_TRITON = True
except ImportError:  # pragma: no cover - exercised only on hosts without Triton
    HAS_TRITON = False

    def _identity_jit(fn=None, **_options):
        return fn if fn is not None else (lambda f: f)

    triton = SimpleNamespace(jit=_identity_jit, cdiv=lambda a, b: -(-a // b))
    tl = SimpleNamespace(constexpr=None)

__all__ = [
    "HAS_TRITON",
    "await_inputs",
    "cdiv",
    "interpreting",
    "kernels_mode",
    "launch_overlap",
    "launch_overlap_mode",
    "next_power_of_2",
    "num_compute_units",
    "set_launch_overlap_mode",
    "set_mode",
    "tanh",
    "tl",
    "triton",
    "use_triton",
]

MODES = ("auto", "torch", "triton")
_switch = ModeSwitch("kernels", MODES)


def set_mode(mode: str) -> str:
    """Choose the dispatch rule of this process; returns the previous one. The engine sets it from
    ``EngineConfig.kernels`` when it builds (``engine/switches.py``); tests may set it directly."""
    return _switch.set(mode)


def kernels_mode() -> str:
    """``auto`` (default), ``torch`` (references everywhere) or ``triton``."""
    return _switch.mode


def use_triton(*tensors: torch.Tensor) -> bool:
    """Whether an op on these tensors should run its Triton kernel.

    ``auto``: only when Triton imports and every tensor is on CUDA. ``torch``: never.
    ``triton``: always (with ``TRITON_INTERPRET=1`` that runs kernels on CPU tensors, which is how
    the tests exercise them without a GPU); it fails loudly when Triton is missing.
    """
    mode = _switch.mode
    if mode == "torch":
        return False
    if mode == "triton":
        if not HAS_TRITON:
            raise RuntimeError("kernels mode triton, but triton is not installed")
        return True
    return HAS_TRITON and all(t.is_cuda for t in tensors)


# Programmatic dependent launch (Hopper and later): a kernel launched with it may start while the
# kernel before it in the stream still runs, and waits in ``await_inputs`` until that one has
# finished and its writes are visible. In a CUDA graph of a decode step this hides most of the
# launch gap between consecutive small kernels.
LAUNCH_OVERLAP_MODES = ("auto", "off")
_overlap_switch = ModeSwitch("launch_overlap", LAUNCH_OVERLAP_MODES)


def set_launch_overlap_mode(mode: str) -> str:
    """``auto``: programmatic dependent launch wherever the GPU has it; ``off``: never. Set from
    ``EngineConfig.launch_overlap`` (``engine/switches.py``); returns the previous mode."""
    return _overlap_switch.set(mode)


def launch_overlap_mode() -> str:
    return _overlap_switch.mode


@functools.lru_cache(maxsize=16)
def _compute_capability(device_index: int) -> tuple[int, int]:
    return torch.cuda.get_device_capability(device_index)


# Above this many rows (tokens, or sequences of a decode batch) a launch waits for the last as before:
# overlap pays where launch gaps are a large share of a step (batch-1 decode: 5-10 % on an H200),
# and the MoE models' batch-128 decode graphs replayed 14-23 % slower with it (docs/performance.md,
# issue 16, session 23).
LAUNCH_OVERLAP_MAX_ROWS = 16


def launch_overlap(device: torch.device, rows: int) -> dict:
    """Launch keywords of a kernel that opens with ``await_inputs(USE_PDL)``, for a launch over ``rows``
    rows: the constexpr and the launch attribute always come together (a kernel launched early must
    wait for its inputs)."""
    if (
        _overlap_switch.mode == "off"
        or rows > LAUNCH_OVERLAP_MAX_ROWS
        or device.type != "cuda"
        or interpreting()
    ):
        return {"USE_PDL": False}
    index = device.index if device.index is not None else torch.cuda.current_device()
    if _compute_capability(index)[0] < 9:
        return {"USE_PDL": False}
    return {"USE_PDL": True, "launch_pdl": True}


@triton.jit
def await_inputs(USE_PDL: tl.constexpr):
    """A kernel's first statement: with programmatic dependent launch, wait until the previous
    kernel in the stream has finished (its writes visible; its reads done, so this kernel may
    overwrite them), then let the next kernel launch early and wait in its turn. Every program
    waits, so a kernel finishes only after the one before it: the order stays transitive."""
    if USE_PDL:
        tl.extra.cuda.gdc_wait()
        tl.extra.cuda.gdc_launch_dependents()


def interpreting() -> bool:
    """Whether Triton kernels run in its CPU interpreter (``TRITON_INTERPRET=1``)."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def next_power_of_2(n: int) -> int:
    """Smallest power of two >= n (1 for n <= 1); Triton tiles need power-of-two extents."""
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


@functools.lru_cache(maxsize=16)
def _sm_count(device_index: int) -> int:
    return torch.cuda.get_device_properties(device_index).multi_processor_count


def num_compute_units(device: torch.device) -> int:
    """Streaming multiprocessors on a CUDA device; a nominal 16 elsewhere (the CPU interpreter)."""
    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        return _sm_count(index)
    return 16


@triton.jit
def tanh(x):
    """tanh of an fp32 tensor from ``exp2`` (Triton's only tanh is libdevice's, which its CPU
    interpreter cannot run): ``(1 - e) / (1 + e)`` with ``e = exp(-2|x|)`` never overflows, and its error is
    a few fp32 ulps of 1 (relative to tanh only where |x| is tiny, and so is tanh's part there)."""
    e = tl.exp2(-2.8853900817779268 * tl.abs(x))  # 2 / ln(2)
    y = (1.0 - e) / (1.0 + e)
    return tl.where(x < 0, -y, y)


def check_last_dim_contiguous(name: str, t: torch.Tensor) -> None:
    if t.stride(-1) != 1:
        raise ValueError(f"{name} must be contiguous in its last dimension, got strides {t.stride()}")
