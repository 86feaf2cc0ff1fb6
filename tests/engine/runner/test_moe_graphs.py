"""The MoE block graphs' input path (static buffers, padding to a captured token count, routing
statistics without the padding), run eagerly on CPU: ``use_eager`` replays the block over the same
static buffers a CUDA graph would read. The capture itself runs on the H200
(``tests/engine/runner/test_moe_graphs_cuda.py``)."""

import random

import pytest
import torch

from engine import LLM, SamplingParams
from engine.layers.moe import routing_statistics
from engine.runner.moe_graphs import MoEBlockGraphs, graphable_moe_layers, moe_graph_sizes


def test_the_ladder_of_sizes_is_dense_where_padding_would_cost_most():
    assert moe_graph_sizes(1) == [1]
    assert moe_graph_sizes(40) == [16, 32, 40]
    sizes = moe_graph_sizes(8192)
    assert sizes[:8] == [16, 32, 48, 64, 80, 96, 112, 128]
    assert sizes[-1] == 8192 and sizes == sorted(set(sizes))
    gaps = {b: b - a for a, b in zip(sizes, sizes[1:], strict=False)}
    assert all(gap <= max(16, size // 4) for size, gap in gaps.items())  # padding under 1/4 past 128
    assert len(sizes) == 32 and len(moe_graph_sizes(2048)) == 24
    with pytest.raises(ValueError, match="max_tokens must be >= 1"):
        moe_graph_sizes(0)


def _moe_engine(tiny_models, arch, **options):
    return LLM(tiny_models[arch], device="cpu", max_num_seqs=4, **options)


@pytest.mark.parametrize("arch", ["qwen3_moe", "deepseek_v3"])
def test_a_block_through_its_graph_equals_the_block_and_counts_only_real_rows(tiny_models, arch):
    model = _moe_engine(tiny_models, arch).engine.runner.model
    layers = graphable_moe_layers(model)
    assert layers
    hidden = layers[0].experts.w2.shape[1]
    graphs = MoEBlockGraphs(layers, 100, hidden, torch.float32, torch.device("cpu"))
    graphs.use_eager()
    torch.manual_seed(0)
    for rows in (1, 5, 16, 17, 33, 100):  # on a size, between sizes (padded), the largest
        x = torch.randn(rows, hidden)
        for layer in layers:
            layer.expert_token_counts.zero_()
        expected = [layer.run(x) for layer in layers]
        counts = [layer.expert_token_counts.clone() for layer in layers]
        for layer in layers:
            layer.expert_token_counts.zero_()
        graphs.x.normal_()  # padding rows hold earlier contents, never zeros by luck
        for layer, want, count in zip(layers, expected, counts, strict=True):
            got = graphs.run(layer, x)
            # (a CPU matmul's rounding follows its row count: the padded block's is the size's)
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
            assert torch.equal(layer.expert_token_counts, count)
            assert int(count.sum()) == rows * layer.gate.moe.top_k
    assert graphs.blocks_run == 6 * len(layers)
    assert graphs.run(layers[0], torch.randn(101, hidden)) is None  # past the largest size
    assert graphs.run(layers[0], torch.randn(4, hidden, dtype=torch.float64)) is None


@pytest.mark.parametrize("arch", ["qwen3_moe", "deepseek_v3"])
def test_an_engine_with_moe_graphs_gives_the_eager_tokens_and_statistics(tiny_models, arch):
    rng = random.Random(3)
    prompts = [[rng.randrange(3, 500) for _ in range(rng.randrange(20, 90))] for _ in range(5)]
    params = SamplingParams(max_tokens=8, temperature=0.0, ignore_eos=True)

    def run(graphs: bool):
        llm = _moe_engine(tiny_models, arch, max_num_batched_tokens=64)  # prompts in several chunks
        runner = llm.engine.runner
        layers = runner.capture_moe_graphs(64, eager=True) if graphs else 0
        tokens = [o.token_ids for o in llm.generate(prompts, params)]
        return tokens, routing_statistics(runner.model), layers, runner.moe_graphs

    eager_tokens, eager_counts, _, _ = run(graphs=False)
    tokens, counts, layers, graphs = run(graphs=True)
    assert tokens == eager_tokens
    assert counts == eager_counts  # padding rows are never counted
    assert layers == len(graphs.layers) > 0
    assert graphs.blocks_run >= layers  # every eager step's blocks went through the graphs


def test_a_dense_model_has_no_moe_graphs(tiny_models):
    runner = LLM(tiny_models["llama"], device="cpu", max_num_seqs=2).engine.runner
    assert runner.capture_moe_graphs(64, eager=True) == 0
    assert runner.moe_graphs is None


def test_a_capture_without_cuda_is_refused(tiny_models):
    runner = _moe_engine(tiny_models, "qwen3_moe").engine.runner
    with pytest.raises(ValueError, match="CUDA graphs need a CUDA device"):
        runner.capture_moe_graphs(64)


@pytest.mark.parametrize(
    ("error", "reason"),
    [
        (torch.OutOfMemoryError("CUDA out of memory"), "no memory for their pool"),
        (RuntimeError("operation not permitted when stream is capturing"), "capture failed: operation"),
    ],
)
def test_a_capture_that_fails_leaves_the_blocks_eager(tiny_models, monkeypatch, caplog, error, reason):
    """A capture that runs out of device memory (the KV pool took it), or fails otherwise, must not
    stop the engine: the blocks run eagerly and a warning says why. (The device is faked: no CUDA here.)"""
    from engine.runner import model_runner

    class Failing:
        def __init__(self, *args) -> None:
            pass

        def capture(self) -> None:
            raise error

    runner = _moe_engine(tiny_models, "qwen3_moe").engine.runner
    monkeypatch.setattr(model_runner, "MoEBlockGraphs", Failing)
    monkeypatch.setattr(runner, "device", torch.device("cuda"))
    with caplog.at_level("WARNING", logger="chassis.runner"):
        assert runner.capture_moe_graphs(64) == 0
    assert runner.moe_graphs is None
    assert all(layer.block_graphs is None for layer in graphable_moe_layers(runner.model))
    assert "MoE block graphs left out" in caplog.text and reason in caplog.text
