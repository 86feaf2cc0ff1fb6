"""Causal attention over packed sequences of different lengths in one call: flash attention through
``torch.nn.attention.varlen`` (CUDA only).

A prefill step attends request by request otherwise, and on an H200 each small attention call cost
more host time than its kernel (issue 16: an 8,192-token step of 15 prompts spent half its span
between kernels). Flash attention aligns the causal mask bottom-right, so a query chunk after a
cached prefix sees that prefix and its own earlier rows, as the engine needs. It takes one head size
for queries, keys and values: a narrower value is padded with zeros and the padding cut from the
output.
"""

from __future__ import annotations

import inspect
from itertools import accumulate

import torch
import torch.nn.functional as F

from kernels.step_memo import StepMemo

try:
    from torch.nn.attention.varlen import varlen_attn as _varlen_attn
except ImportError:  # torch before 2.9
    _varlen_attn = None

# torch 2.9 takes ``is_causal`` and no ``scale``; from 2.10 on ``window_size=(-1, 0)`` is causal.
_PARAMETERS = set(inspect.signature(_varlen_attn).parameters) if _varlen_attn is not None else set()
_CAUSAL = {"window_size": (-1, 0)} if "window_size" in _PARAMETERS else {"is_causal": True}
# Flash attention's head sizes: multiples of 8 up to 256.
MAX_HEAD_DIM = 256


def varlen_available(q: torch.Tensor, head_dim: int) -> bool:
    """Whether ``causal_varlen`` runs for queries like ``q`` with keys of ``head_dim``."""
    return q.is_cuda and _varlen_attn is not None and head_dim % 8 == 0 and head_dim <= MAX_HEAD_DIM


def causal_varlen(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    query_lens: list[int],
    context_lens: list[int],
    scale: float,
) -> torch.Tensor:
    """``q: [sum(query_lens), H, D]``, ``k: [sum(context_lens), H, D]``, ``v: [sum(context_lens), H, V]``
    (V <= D), each request's rows in order; request i's queries are the last ``query_lens[i]``
    positions of its context -> ``[sum(query_lens), H, V]``."""
    width = v.shape[-1]
    scaling = {"scale": scale}
    if "scale" not in _PARAMETERS:  # the kernel's own scale is 1 / sqrt(D)
        q, scaling = q * (scale * k.shape[-1] ** 0.5), {}
    if width != k.shape[-1]:
        v = F.pad(v, (0, k.shape[-1] - width))
    # Every layer of a step asks for the same offsets: one host-to-device copy per step.
    cu_q, cu_k = _OFFSETS(tuple(query_lens), tuple(context_lens), q.device)
    out = _varlen_attn(
        q,
        k,
        v,
        cu_q,
        cu_k,
        max(query_lens),
        max(context_lens),
        **scaling,
        **_CAUSAL,
    )
    return out[..., :width]


def _offsets(
    query_lens: tuple[int, ...], context_lens: tuple[int, ...], device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """The queries' and the contexts' cumulative offsets from 0, as int32 tensors of their own
    (flash attention reads each from its start: no views into one buffer)."""
    values = torch.tensor(
        [*accumulate(query_lens, initial=0), *accumulate(context_lens, initial=0)], dtype=torch.int32
    ).to(device)
    count = len(query_lens) + 1
    return values[:count].clone(), values[count:].clone()


_OFFSETS = StepMemo(_offsets, tensors=0)
