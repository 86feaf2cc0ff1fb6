import pytest
import torch

from kernels._config_table import device_name
from kernels.invariant_matmul import MatmulConfig, invariant_matmul, invariant_matmul_torch
from kernels.invariant_matmul_configs import MatmulTable, reference_config, verify_table
from tests.kernels.tolerances import assert_close

N, K = 70, 200  # neither a multiple of any block: partial N slabs, masked K tails
SMALL = MatmulConfig(16, 32, 64, num_stages=2)  # small tiles: several row tiles and K steps at these sizes


def _inputs(device, dtype, rows, bias=True):
    x = torch.randn(rows, K, device=device).to(dtype)
    weight = (torch.randn(N, K, device=device) / K**0.5).to(dtype)
    return x, weight, (torch.randn(N, device=device).to(dtype) if bias else None)


def test_reference_config_depends_on_the_weight_only():
    assert reference_config(4096, 4096) == reference_config(4096, 14336)
    assert reference_config(4096, 4096).block_n == 32 and reference_config(128256, 4096).block_n == 64
    assert len({reference_config(4096, 4096).block_m, reference_config(128256, 4096).block_m}) == 1


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("rows", [1, 5, 70])
@pytest.mark.parametrize("config", [None, SMALL], ids=["default", "small"])
def test_matches_reference(device, force_triton, dtype, rows, config):
    x, weight, bias = _inputs(device, dtype, rows)
    out = invariant_matmul(x, weight, bias, config=config)
    assert out.shape == (rows, N)
    assert_close(out, invariant_matmul_torch(x, weight, bias), dtype)
    torch.testing.assert_close(
        out.float(), torch.nn.functional.linear(x.float(), weight.float(), bias.float()), atol=5e-2, rtol=2e-2
    )


@pytest.fixture
def tile_table(request, device, matmul_table):
    """``"table"``: a verified tile table with another config for each bucket the test's batches take
    (the reference's K step: in the interpreter, unlike on a GPU, the K step groups the fp32 sums)."""
    if request.param != "table":
        return
    configs = [MatmulConfig(m, n, 128, w, s) for m, n, w, s in ((16, 16, 4, 2), (16, 64, 4, 3), (32, 32, 4, 4),
                                                                 (128, 64, 8, 3), (128, 128, 8, 3))]  # fmt: skip
    entries = {("bfloat16", N, K, b): c for b, c in zip((1, 4, 32, 64, 128), configs, strict=True)}
    MatmulTable(device_name(device), entries).save(matmul_table)
    assert verify_table([torch.zeros(N, K, dtype=torch.bfloat16, device=device)]).verified == len(entries)


@pytest.mark.parametrize("tile_table", ["reference", "table"], indirect=True)
@pytest.mark.parametrize("config", [None, SMALL], ids=["default", "small"])
def test_a_row_has_the_same_bits_at_every_batch_size_and_position(
    device, force_triton, row_invariant_dot, tile_table, config
):
    x, weight, bias = _inputs(device, torch.bfloat16, 4)
    alone = invariant_matmul(x[:1], weight, bias, config=config)
    for rows, position in ((1, 0), (3, 2), (17, 9), (64, 63), (100, 70)):
        batch = torch.randn(rows, K, device=device).to(torch.bfloat16)
        batch[position] = x[0]
        out = invariant_matmul(batch, weight, bias, config=config)
        assert torch.equal(out[position], alone[0]), (rows, position)


def test_bad_shapes_are_refused():
    with pytest.raises(ValueError, match="x \\[M, K\\]"):
        invariant_matmul(torch.zeros(2, 3), torch.zeros(4, 5))
    with pytest.raises(ValueError, match="bias"):
        invariant_matmul(torch.zeros(2, 3), torch.zeros(4, 3), torch.zeros(5))
