"""Which side of tests/engine/layers/test_mla.py's CUDA varlen test is off: the step attended in one
varlen call, the same step attended request by request, and each request alone, on CUDA in bf16,
compared per request.

    python3 scripts/gpu/diag_mla_varlen.py
"""

from __future__ import annotations

import sys
from pathlib import Path

DEVICE = sys.argv[1] if len(sys.argv) > 1 else "cuda"
ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "engine" / "layers")]


def main() -> int:
    import pytest
    import test_mla
    import torch

    from engine.layers import latent_attention

    rows = {"a": (0, 1), "c": (1, 5), "d": (5, 10), "b": (10, 11)}
    results = {}
    for varlen in (True, False):
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(latent_attention, "use_triton", lambda *tensors: True)
            if not varlen:
                mp.setattr(latent_attention, "varlen_available", lambda *args: False)
            together, alone, _ = test_mla._fresh_beside_cached(mp, DEVICE, torch.bfloat16, nope_v=(12, 8))
        results["together, varlen" if varlen else "together, per request"] = together.float()
        results["alone" if varlen else "alone (second run)"] = alone.float()
    names = list(results)
    for i, x in enumerate(names):
        for y in names[i + 1 :]:
            errors = {r: (results[x][a:b] - results[y][a:b]).abs().max().item() for r, (a, b) in rows.items()}
            print(f"{x:>22} vs {y:<22}: " + ", ".join(f"{r} {e:.4f}" for r, e in errors.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
