import pytest
import torch

from kernels.head_gemv import MAX_ROWS, head_gemv, head_gemv_torch
from tests.kernels.tolerances import assert_close

HEADS, NOPE, RANK, V = 4, 24, 40, 20  # odd sizes: every mask edge


def kv_b_lifts(device, dtype):
    """A kv_b_proj weight ``[H * (N + V), R]`` split as latent attention splits it: the key lift
    ``[H, N, R]`` and the value lift transposed ``[H, R, V]`` (strided views of one tensor)."""
    w = torch.randn(HEADS * (NOPE + V), RANK, device=device).to(dtype).view(HEADS, NOPE + V, RANK)
    return w[:, :NOPE], w[:, NOPE:].transpose(1, 2)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("rows", [1, 3, MAX_ROWS])
def test_both_lifts_match_einsum(device, force_triton, dtype, rows):
    w_uk, w_uv_t = kv_b_lifts(device, dtype)
    q_nope = torch.randn(rows, HEADS, NOPE, device=device).to(dtype)
    latent = torch.randn(rows, HEADS, RANK, device=device).to(dtype)
    for x, w in ((q_nope, w_uk), (latent, w_uv_t)):
        expected = head_gemv_torch(x.double(), w.double()).to(dtype)
        assert_close(head_gemv(x, w), expected, dtype)


def test_rows_of_a_strided_query(device, force_triton):
    """The query's no-rope part is a view of [T, H, N + P] rows."""
    w_uk, _ = kv_b_lifts(device, torch.float32)
    q = torch.randn(2, HEADS, NOPE + 8, device=device)
    q_nope = q[..., :NOPE]
    assert_close(head_gemv(q_nope, w_uk), head_gemv_torch(q_nope, w_uk), torch.float32)


def test_bad_shapes_are_rejected():
    w_uk, _ = kv_b_lifts("cpu", torch.float32)
    with pytest.raises(ValueError, match="at most 16 rows"):
        head_gemv(torch.zeros(MAX_ROWS + 1, HEADS, NOPE), w_uk)
    with pytest.raises(ValueError, match=r"x must be \[T, H, I\]"):
        head_gemv(torch.zeros(1, HEADS, NOPE + 1), w_uk)
    with pytest.raises(ValueError, match="share a dtype"):
        head_gemv(torch.zeros(1, HEADS, NOPE, dtype=torch.bfloat16), w_uk)
