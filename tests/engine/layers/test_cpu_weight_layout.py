"""CPU weights stored column-major where the one-row product reads them faster
(engine/layers/cpu_weight_layout.py): which weights move, that the model computes the same thing,
and where nothing moves."""

import pytest
import torch

from engine import switches
from engine.checkpoint.model_config import load_model_config
from engine.layers.cpu_weight_layout import arrange_cpu_weights, prefers_column_major
from engine.layers.embedding import LMHead
from engine.layers.linear import CPU_SLICED_MIN_ROWS, Linear
from engine.models.loader import load_model
from kernels._common import set_mode
from kernels.invariance import set_batch_invariant


def _load(model_dir, layout: str):
    switches.Switches(cpu_weight_layout=layout).apply()
    try:
        cfg = load_model_config(model_dir)
        return cfg, load_model(model_dir, cfg, torch.float32, torch.device("cpu"), 64)
    finally:
        switches.Switches().apply()


def _column_major(t: torch.Tensor) -> bool:
    return t.stride() == (1, t.shape[0])


def test_wide_weights_move_and_narrow_ones_stay(tiny_llama):
    _, model = _load(tiny_llama, "auto")
    linears = [m for m in model.modules() if isinstance(m, Linear)]
    assert linears
    for module in linears:
        out_features, in_features = module.weight.shape
        assert _column_major(module.weight) == (out_features >= in_features), module
        assert module.weight.is_contiguous() == (out_features < in_features)
    assert any(_column_major(m.weight) for m in linears)
    assert any(m.weight.is_contiguous() for m in linears)  # the down projection is narrower


def test_row_major_keeps_every_weight_as_loaded(tiny_llama):
    _, model = _load(tiny_llama, "row-major")
    assert all(p.is_contiguous() for p in model.parameters())


@pytest.mark.parametrize("how", ["batch-invariant", "triton-kernels"])
def test_nothing_moves_where_the_layout_would_change_a_kernel(tiny_llama, how):
    _, model = _load(tiny_llama, "row-major")
    restore = set_batch_invariant(True) if how == "batch-invariant" else set_mode("triton")
    try:
        assert arrange_cpu_weights(model) == 0
    finally:
        set_batch_invariant(restore) if how == "batch-invariant" else set_mode(restore)
    assert all(p.is_contiguous() for p in model.parameters())


def test_same_logits_as_row_major(tiny_llama):
    """One decode-sized and one prompt-sized forward: the layouts sum in other orders at one row
    (MKL's GEMV), so the logits agree to rounding and the greedy tokens exactly."""
    from engine import LLM, SamplingParams

    prompts = [[3, 17, 5, 9, 2, 11, 40, 7], [8, 1, 30]]
    greedy = SamplingParams(max_tokens=12, temperature=0.0, ignore_eos=True, logprobs=2)
    outputs = {}
    for layout in ("auto", "row-major"):
        llm = LLM(str(tiny_llama), device="cpu", dtype="float32", cpu_weight_layout=layout)
        outputs[layout] = llm.generate(prompts, greedy)
        llm.shutdown()
    for auto, rows in zip(outputs["auto"], outputs["row-major"], strict=True):
        assert auto.token_ids == rows.token_ids
        for a, r in zip(auto.logprobs, rows.logprobs, strict=True):
            assert a.token_id == r.token_id and a.logprob == pytest.approx(r.logprob, abs=1e-4)
            # the alternatives' log-probabilities agree to rounding (their order may flip on a tie)
            theirs = dict(r.top)
            assert all(lp == pytest.approx(theirs.get(t, lp), abs=1e-4) for t, lp in a.top)


def test_a_tall_lm_head_keeps_its_rows_and_gets_a_one_row_copy():
    """A vocabulary as tall as the sliced products: the row-major weight serves batches (its slices
    are faster), the column-major copy one or two rows; both give the product's logits."""
    torch.manual_seed(0)
    head = LMHead(CPU_SLICED_MIN_ROWS + 5, 32, torch.float32, torch.device("cpu"))
    head.weight.data.normal_()
    assert arrange_cpu_weights(torch.nn.Sequential(head)) == 1
    assert head.weight.is_contiguous() and head.one_row_weight is not None
    assert _column_major(head.one_row_weight) and torch.equal(head.one_row_weight, head.weight)
    for rows in (1, 2, 5):
        x = torch.randn(rows, 32)
        torch.testing.assert_close(head(x), x @ head.weight.T)


def test_a_small_lm_head_is_stored_column_major_itself():
    head = LMHead(512, 32, torch.float32, torch.device("cpu"))
    assert prefers_column_major(head.weight)
    arrange_cpu_weights(torch.nn.Sequential(head))
    assert _column_major(head.weight) and head.one_row_weight is None
