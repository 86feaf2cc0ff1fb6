"""Diagnosis for issue 20 item 1: batch-invariant decode through CUDA graphs vs the same step eager.

Runs batch_invariance.py's b256 reference, then its b256-hits configuration with every decode-graph
replay followed by the same step run eagerly (same inputs; the KV it rewrites gets the same values),
and prints, per graph step, its size and the rows whose logits differ bitwise.

  python3 scripts/gpu/diag_graph_invariance.py
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import batch_invariance as bi  # noqa: E402


def main() -> int:

    from engine.bench.random_arch import hf_config, write_config_dir
    from engine.runner.inputs import build_inputs

    parser = bi.argparse.ArgumentParser()
    args = parser.parse_args([])
    for name, value in dict(
        device="cuda", dtype="bfloat16", kernels=None, max_num_seqs=256, max_num_batched_tokens=2048,
        max_model_len=2048, gpu_memory_utilization=0.45, enforce_eager=False, no_async_scheduling=True,
        prompts=256, min_prompt=16, max_prompt=640, max_tokens=16, seed=0, chunk=64,
    ).items():  # fmt: skip
        setattr(args, name, value)
    with tempfile.TemporaryDirectory() as tmp:
        model = write_config_dir("llama-3.1-8b", Path(tmp) / "m")
        llm = bi.build(model, args, batch_invariant=True)
        vocab = hf_config("llama-3.1-8b")["vocab_size"]
        prompts = bi.make_prompts(args.prompts, args.min_prompt, args.max_prompt, vocab, args.seed)
        params = bi.make_params(args.prompts, args.max_tokens)
        reference = bi.run_config(llm, "b256", prompts, params, 0, 64, 2048)
        runner = llm.engine.runner
        graphs = runner.graphs
        original = graphs.run
        step = [0]

        def checked(out, before_copies=None, feed=None):
            logits = original(out, before_copies, feed).clone()
            inputs = build_inputs(out, runner.block_size, runner.device)
            eager = runner.model.decode_logits(inputs.token_ids, inputs.positions, inputs.meta)
            differ = (logits != eager).any(dim=-1).nonzero().flatten().tolist()
            size = next(s for s in graphs.sizes if s >= len(out.scheduled))
            print(f"graph step {step[0]}: {len(out.scheduled)} rows (size {size}), rows differing from eager: "
                  f"{len(differ)} {differ[:12]}", flush=True)  # fmt: skip
            step[0] += 1
            return logits

        graphs.run = checked
        got = bi.run_config(llm, "b256-hits", prompts, params, 0, 64, 2048)
        same = sum(a == b for a, b in zip(got, reference, strict=True))
        print(f"b256-hits: {same}/{len(got)} identical to b256")
    return 0


if __name__ == "__main__":
    sys.exit(main())
