"""A CPU model's wide weights get a column-major copy that one-row products go through; products of
more rows keep the row-major weight and their bits."""

import torch
import torch.nn.functional as F

from engine.checkpoint.model_config import load_model_config
from engine.layers.cpu_gemv_copies import add_column_major_copies, column_major_copy
from engine.layers.embedding import LMHead
from engine.layers.linear import Linear, matmul
from engine.models.loader import load_model


def test_loaded_cpu_model_has_copies_of_its_wide_weights_only(tiny_llama):
    model = load_model(tiny_llama, load_model_config(tiny_llama), torch.float32, torch.device("cpu"), 64)
    layers = [m for m in model.modules() if isinstance(m, Linear | LMHead)]
    wide = [m for m in layers if m.weight.shape[0] > m.weight.shape[1]]
    assert wide and len(wide) < len(layers)  # q/k/v, gate/up and the head; not o_proj or down_proj
    for module in layers:
        copy = column_major_copy(module.weight)
        if module in wide:
            assert copy.is_contiguous() and torch.equal(copy, module.weight.t())
        else:
            assert copy is None
    assert add_column_major_copies(model) == 0  # once only


def test_one_row_takes_the_copy_and_more_rows_keep_their_bits():
    torch.manual_seed(0)
    weight = torch.randn(96, 32) / 32**0.5
    bias = torch.randn(96)
    x = torch.randn(5, 32)
    before = [matmul(x[:rows], weight, bias) for rows in (1, 2, 5)]
    weight.cpu_column_major = weight.t().contiguous()
    one = matmul(x[:1], weight, bias)
    assert torch.equal(one, F.linear(x[:1], weight.cpu_column_major.t(), bias))
    torch.testing.assert_close(one, before[0], rtol=1e-5, atol=1e-5)  # another GEMV, same product
    assert torch.equal(matmul(x[:2], weight, bias), before[1])
    assert torch.equal(matmul(x, weight, bias), before[2])


def test_batch_invariant_mode_makes_and_uses_no_copies(tiny_llama):
    from kernels.invariance import set_batch_invariant

    before = set_batch_invariant(True)
    try:
        model = load_model(tiny_llama, load_model_config(tiny_llama), torch.float32, torch.device("cpu"), 64)
        assert all(
            column_major_copy(m.weight) is None for m in model.modules() if isinstance(m, Linear | LMHead)
        )
        weight = torch.randn(96, 32)
        weight.cpu_column_major = torch.zeros(32, 96)  # would give zeros if it were used
        x = torch.randn(1, 32)
        assert torch.equal(matmul(x, weight), F.linear(torch.cat((x, torch.randn(3, 32))), weight)[:1])
    finally:
        set_batch_invariant(before)
