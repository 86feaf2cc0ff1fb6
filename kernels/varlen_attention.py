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

import functools
import inspect
import logging
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
# Flash attention's head sizes: multiples of 8 up to 256; its dtypes.
MAX_HEAD_DIM = 256
FLASH_DTYPES = (torch.float16, torch.bfloat16)
# bf16 inputs, fp32 reference: the largest difference the self-check accepts.
AGREEMENT_TOLERANCE = 2e-2
logger = logging.getLogger(__name__)


def varlen_available(q: torch.Tensor, head_dim: int) -> bool:
    """Whether ``causal_varlen`` runs for queries like ``q`` with keys of ``head_dim``: on CUDA, in
    half precision (flash attention's only dtypes: an fp32 engine attends request by request), with
    a torch that has it, and once ``agrees_with_sdpa`` has passed on this device."""
    if not (q.is_cuda and _varlen_attn is not None and head_dim % 8 == 0 and head_dim <= MAX_HEAD_DIM):
        return False
    if q.dtype not in FLASH_DTYPES:
        return False
    return agrees_with_sdpa(q.device)


@functools.cache
def agrees_with_sdpa(device: torch.device) -> bool:
    """Runs ``causal_varlen`` once on ``device`` for two packed requests, one after a cached prefix
    and one fresh, against per-request SDPA with a bottom-right causal mask. The varlen entry point's
    signature, backend and causal alignment have changed between torch releases (and a first
    version of this module got wrong offsets on an H200); a disagreement logs a warning and leaves
    the per-request path in use."""
    gen = torch.Generator(device=device).manual_seed(0)
    query_lens, context_lens, heads, dim, width = [4, 5], [8, 5], 2, 16, 8

    def rand(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, device=device, generator=gen).to(torch.bfloat16)

    q, k, v = (
        rand(sum(query_lens), heads, dim),
        rand(sum(context_lens), heads, dim),
        rand(sum(context_lens), heads, width),
    )
    try:
        got = causal_varlen(q, k, v, query_lens, context_lens, dim**-0.5).float()
    except RuntimeError as error:
        logger.warning("flash-attention varlen unusable here (%s): prefill attends request by request", error)
        return False
    want = causal_reference(q, k, v, query_lens, context_lens, dim**-0.5)
    error = (got - want).abs().max().item()
    if error > AGREEMENT_TOLERANCE:
        logger.warning(
            "flash-attention varlen differs from per-request attention by %.3g here: prefill attends request by request",
            error,
        )
        return False
    return True


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


def causal_reference(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    query_lens: list[int],
    context_lens: list[int],
    scale: float,
) -> torch.Tensor:
    """``causal_varlen``'s torch reference in fp32: SDPA request by request, each query row seeing
    its context up to its own position (the mask aligned bottom-right)."""
    outs, first, start = [], 0, 0
    for n, length in zip(query_lens, context_lens, strict=True):
        keys = torch.arange(length, device=q.device)
        mask = keys <= torch.arange(length - n, length, device=q.device).unsqueeze(1)
        one = F.scaled_dot_product_attention(
            *(
                t.transpose(0, 1).float()
                for t in (q[start : start + n], k[first : first + length], v[first : first + length])
            ),
            attn_mask=mask,
            scale=scale,
        )
        outs.append(one.transpose(0, 1))
        first, start = first + length, start + n
    return torch.cat(outs)
