"""Kernel-vs-reference closeness per dtype, importable by name from any test module.

It lives outside ``conftest.py`` because ``from conftest import ...`` resolves to whichever
conftest pytest registered last when several test directories are collected in one run.
"""

import torch

# (atol, rtol) per dtype for kernel-vs-reference comparisons; bf16 differences are one rounding step.
TOLERANCES = {
    torch.float32: (1e-5, 1e-5),
    torch.float16: (2e-3, 2e-3),
    torch.bfloat16: (2e-2, 2e-2),
}


def assert_close(actual: torch.Tensor, expected: torch.Tensor, dtype: torch.dtype) -> None:
    atol, rtol = TOLERANCES[dtype]
    assert actual.dtype == expected.dtype
    torch.testing.assert_close(actual.float(), expected.float(), atol=atol, rtol=rtol)
