"""Where does a tensor-parallel engine hang at shutdown on CUDA? Dumps every thread's stack after 40 s."""

import faulthandler
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def main() -> None:
    from engine import LLM, SamplingParams
    from engine.testing.tiny_model import make_tiny_model

    faulthandler.dump_traceback_later(40, exit=True)
    with tempfile.TemporaryDirectory() as tmp:
        model = make_tiny_model(Path(tmp) / "llama", arch="llama", dtype="bfloat16")
        llm = LLM(model, dtype="bfloat16", tensor_parallel_size=2, num_gpu_blocks=256, max_num_seqs=4)
        out = llm.generate(["hello there"], SamplingParams(max_tokens=8, temperature=0.0, ignore_eos=True))
        print("generated", out[0].token_ids, flush=True)
        t = time.monotonic()
        llm.shutdown()
        print(f"shutdown took {time.monotonic() - t:.1f} s", flush=True)
        del llm
    print("exiting", flush=True)


if __name__ == "__main__":
    main()
