"""The MoE block graphs captured for real (CUDA): an engine with them gives the tokens and routing
statistics of one without, and its eager steps' blocks replay them. Runs on the GPU machine
(``scripts/gpu/moe_graphs_check.sh``); skipped where there is no CUDA device."""

import random

import pytest
import torch

from engine import LLM, SamplingParams
from engine.layers.moe import routing_statistics

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


@pytest.mark.parametrize("arch", ["qwen3_moe", "deepseek_v3"])
def test_captured_moe_graphs_give_the_eager_tokens_and_statistics(tiny_models, arch):
    rng = random.Random(3)
    prompts = [[rng.randrange(3, 500) for _ in range(rng.randrange(20, 200))] for _ in range(6)]
    params = SamplingParams(max_tokens=8, temperature=0.0, ignore_eos=True)

    def run(mode: str):
        llm = LLM(
            tiny_models[arch], device="cuda", dtype="float32", max_num_seqs=4,
            max_num_batched_tokens=128, moe_graphs=mode,
        )  # fmt: skip
        try:
            tokens = [o.token_ids for o in llm.generate(prompts, params)]
            runner = llm.engine.runner
            return tokens, routing_statistics(runner.model), runner.moe_graphs
        finally:
            llm.shutdown()

    off_tokens, off_counts, none = run("off")
    tokens, counts, graphs = run("auto")
    assert none is None
    assert graphs is not None and graphs.replays and graphs.blocks_run > 0
    assert tokens == off_tokens
    assert counts == off_counts
