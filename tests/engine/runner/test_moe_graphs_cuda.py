"""The MoE block graphs captured for real (CUDA): an engine with them gives the tokens and routing
statistics of one without, and its eager steps' blocks replay them. Runs on the GPU machine
(``scripts/gpu/moe_graphs_check.sh``); skipped where there is no CUDA device."""

import gc
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
        # A KV pool of its own size: sized from free memory, the second engine of the process would
        # find the first one's pool still held by the caching allocator.
        llm = LLM(
            tiny_models[arch], device="cuda", dtype="float32", max_num_seqs=4,
            max_num_batched_tokens=128, moe_graphs=mode, num_gpu_blocks=256,
        )  # fmt: skip
        try:
            tokens = [o.token_ids for o in llm.generate(prompts, params)]
            graphs = llm.engine.runner.moe_graphs
            replayed = None if graphs is None else (len(graphs.replays), graphs.blocks_run)
            return tokens, routing_statistics(llm.engine.runner.model), replayed
        finally:
            llm.shutdown()
            del llm
            gc.collect()
            torch.cuda.empty_cache()

    off_tokens, off_counts, none = run("off")
    tokens, counts, replayed = run("auto")
    assert none is None
    assert replayed is not None and replayed[0] > 0 and replayed[1] > 0
    assert tokens == off_tokens
    assert counts == off_counts
