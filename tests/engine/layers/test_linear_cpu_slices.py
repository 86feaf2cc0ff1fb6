"""On a CPU a tall weight at a few input rows is multiplied in row slices; each row's result is the
whole product's, bit for bit, and in batch-invariant mode as it would be among many more rows
(kernels/cpu_invariant.py)."""

import pytest
import torch
import torch.nn.functional as F

from engine.layers.linear import CPU_ROW_SLICE, matmul
from kernels.invariance import set_batch_invariant


@pytest.fixture(params=[False, True], ids=["default", "batch-invariant"])
def invariant(request):
    before = set_batch_invariant(request.param)
    yield request.param
    set_batch_invariant(before)


@pytest.mark.parametrize("rows", [1, 3, 16])
@pytest.mark.parametrize("with_bias", [False, True])
def test_sliced_product_equals_the_whole(monkeypatch, rows, with_bias, invariant):
    torch.manual_seed(0)
    n = 8 * CPU_ROW_SLICE + 77  # a ragged last slice
    weight = torch.randn(n, 64)
    bias = torch.randn(n) if with_bias else None
    x = torch.randn(rows, 64)
    if invariant:
        whole = F.linear(torch.cat((x, torch.randn(16, 64))), weight, bias)[:rows]  # among 16 others
    else:
        whole = F.linear(x, weight, bias)
    products = []
    linear = F.linear
    monkeypatch.setattr(F, "linear", lambda *args: products.append(args[1].shape[0]) or linear(*args))
    mm = torch.mm  # a bias-free 2-D product skips F.linear's own dispatch (kernels/cpu_invariant.py)
    monkeypatch.setattr(torch, "mm", lambda a, b: products.append(b.shape[1]) or mm(a, b))
    assert torch.equal(matmul(x, weight, bias), whole)
    if invariant or rows > 1:  # in the mode one row is a 4-row product (MKL's GEMV rounds otherwise)
        assert products == [CPU_ROW_SLICE] * 8 + [77]
    else:  # one row is a GEMV, which MKL streams well whole
        assert products == [n]
