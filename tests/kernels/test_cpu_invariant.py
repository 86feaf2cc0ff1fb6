"""kernels/cpu_invariant.py on this machine's CPU: each row's bits do not follow the row count, the
chunk its attention query came in, or where it sits in an elementwise op."""

import pytest
import torch
import torch.nn.functional as F

from kernels.cpu_invariant import KEY_BLOCK, attend, bmm, linear, padded_rows, pointwise
from kernels.invariance import set_batch_invariant


@pytest.fixture(autouse=True)
def invariant_mode():
    """The helpers pad only in batch-invariant mode; outside it they are torch's own operations."""
    before = set_batch_invariant(True)
    yield
    set_batch_invariant(before)


def test_outside_the_mode_the_helpers_are_torchs_own():
    set_batch_invariant(False)
    assert padded_rows(1) == 1
    x = torch.randn(1, 33)
    assert torch.equal(pointwise(torch.exp, x), torch.exp(x))


@pytest.fixture(params=[1, 2], ids=["1-thread", "2-threads"])
def threads(request):
    before = torch.get_num_threads()
    torch.set_num_threads(request.param)
    yield request.param
    torch.set_num_threads(before)


@pytest.mark.parametrize(("out_features", "in_features"), [(8, 64), (192, 64), (64, 576)])
def test_linear_rows_do_not_follow_the_row_count(threads, out_features, in_features):
    gen = torch.Generator().manual_seed(out_features)
    weight = torch.randn(out_features, in_features, generator=gen)
    bias = torch.randn(out_features, generator=gen)
    x = torch.randn(30, in_features, generator=gen)
    whole = linear(x, weight, bias)
    for rows in range(1, 30):
        assert torch.equal(linear(x[:rows], weight, bias), whole[:rows]), rows
    assert torch.equal(linear(x[13:18], weight, bias), whole[13:18])  # rows from the middle


def test_plain_mkl_rows_do_follow_the_row_count():
    """Why ``linear`` pads: without it a lone row is summed in another order (so the test above
    could fail)."""
    gen = torch.Generator().manual_seed(0)
    weight, x = torch.randn(192, 576, generator=gen), torch.randn(16, 576, generator=gen)
    assert not torch.equal(F.linear(x[:1], weight), F.linear(x, weight)[:1])
    assert padded_rows(1) == 16 and padded_rows(16) == 16 and padded_rows(17) == 32


def test_bmm_rows_do_not_follow_the_row_count():
    gen = torch.Generator().manual_seed(1)
    a, b = torch.randn(3, 30, 40, generator=gen), torch.randn(3, 40, 24, generator=gen)
    whole = bmm(a, b)
    for rows in range(1, 30):
        assert torch.equal(bmm(a[:, :rows], b), whole[:, :rows]), rows


def test_pointwise_bits_do_not_follow_the_position():
    gen = torch.Generator().manual_seed(2)
    logits = torch.randn(83, 8, generator=gen) * 4
    whole = pointwise(torch.sigmoid, logits)
    for rows in range(1, 83):
        assert torch.equal(pointwise(torch.sigmoid, logits[rows - 1 : rows]), whole[rows - 1 : rows]), rows


@pytest.mark.parametrize("softcap", [None, 1.5])
@pytest.mark.parametrize("sliding_window", [None, 24])
def test_attention_rows_do_not_follow_the_chunking(threads, sliding_window, softcap):
    gen = torch.Generator().manual_seed(3)
    length = KEY_BLOCK + 40  # two key blocks
    q = torch.randn(length, 4, 16, generator=gen)
    keys, values = torch.randn(length, 2, 16, generator=gen), torch.randn(length, 2, 12, generator=gen)
    whole = attend(q, keys, values, 0.25, sliding_window, softcap=softcap)
    for chunk in (1, 64):
        for start in range(0, length, chunk):
            stop = min(length, start + chunk)
            got = attend(q[start:stop], keys[:stop], values[:stop], 0.25, sliding_window, softcap=softcap)
            assert torch.equal(got, whole[start:stop]), (chunk, start)
    # the window's keys only, from a KEY_BLOCK-aligned position: the same bits again
    if sliding_window is not None:
        last = attend(q[-1:], keys[KEY_BLOCK:], values[KEY_BLOCK:], 0.25, sliding_window, KEY_BLOCK, softcap)
        assert torch.equal(last, whole[-1:])


def test_attention_is_causal_gqa_attention():
    gen = torch.Generator().manual_seed(4)
    q = torch.randn(300, 4, 16, generator=gen)
    keys, values = torch.randn(300, 2, 16, generator=gen), torch.randn(300, 2, 16, generator=gen)
    expected = F.scaled_dot_product_attention(
        q.transpose(0, 1)[None],
        keys.repeat_interleave(2, 1).transpose(0, 1)[None],
        values.repeat_interleave(2, 1).transpose(0, 1)[None],
        is_causal=True,
        scale=0.25,
    )[0].transpose(0, 1)
    torch.testing.assert_close(attend(q, keys, values, 0.25), expected)


def test_softcapped_attention_caps_the_scores_before_the_mask():
    gen = torch.Generator().manual_seed(5)
    q = torch.randn(300, 4, 16, generator=gen)
    keys, values = torch.randn(300, 2, 16, generator=gen), torch.randn(300, 2, 16, generator=gen)
    scores = torch.einsum("qhd,khd->hqk", q, keys.repeat_interleave(2, 1)) * 0.25
    scores = 1.5 * torch.tanh(scores / 1.5)
    scores = scores.masked_fill(torch.ones(300, 300, dtype=torch.bool).triu(1), float("-inf"))
    expected = torch.einsum("hqk,khd->qhd", scores.softmax(-1), values.repeat_interleave(2, 1))
    torch.testing.assert_close(attend(q, keys, values, 0.25, softcap=1.5), expected)
