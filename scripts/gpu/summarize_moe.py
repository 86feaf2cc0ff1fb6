"""The issue-16 table from ``scripts/gpu/run_moe.sh``'s JSON files: per shape, the engine's figure,
transformers' in the same process, the issue's measured anchor, the floor, and the ratio its goal is on.

    python3 scripts/gpu/summarize_moe.py OUT/deepseek-v2-lite.json OUT/qwen3-30b-a3b.json ...

Each file is one ``chassis bench engine --json`` report; a report whose name ends in ``-offline``
carries the offline mix (as does ``-offline-gathered``, run with a larger ``admission_batch``). Missing figures (a step cut by its time limit) print as ``-``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

# The issue's anchors (acceptance 3), per random architecture: bs=1 / bs=32 transformers tok/s, prefill 2048 tok/s.
ISSUE_ANCHORS = {
    "deepseek-v2-lite": {"hf_bs1": 13.4, "hf_bs32": 289, "hf_prefill": 40_400, "floor_bs1": 831},
    "qwen3-30b-a3b": {"hf_bs1": 11.9, "hf_bs32": 255, "hf_prefill": 23_500, "floor_bs1": 670},
}


def _num(value, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _ratio(ours, theirs) -> float | None:
    return ours / theirs if ours and theirs else None


def shape_rows(name: str, f: dict) -> list[tuple[str, ...]]:
    """(figure, engine, transformers, issue anchor, floor, ratio, goal) rows of one shape's figures."""
    anchor = ISSUE_ANCHORS.get(name, {})
    bs1 = f.get("engine_decode_bs1_decode_tokens_per_s")
    bs1_floor = f.get("floor_decode_bs1_tokens_per_s")
    bs32 = f.get("engine_static_batch_bs32_output_tokens_per_s")
    prefill = f.get("engine_prefill_prefill_2048_tokens_per_s")
    hf_prefill = f.get("hf_prefill_2048_tokens_per_s")
    step = f.get("engine_batch128_decode_step_ms")
    step_floor = f.get("engine_batch128_floor_decode_step_ms")
    return [
        (
            "decode bs1 tok/s (prompt 1024, 256 out)",
            _num(bs1),
            _num(f.get("hf_decode_bs1_tokens_per_s")),
            _num(anchor.get("hf_bs1")),
            _num(bs1_floor),
            f"{_num(_ratio(bs1, bs1_floor), 3)} of floor",
            ">= 0.5 of floor",
        ),
        (
            "bs32 out tok/s (prompt 512, 128 out)",
            _num(bs32),
            _num(f.get("hf_static_bs32_output_tokens_per_s")),
            _num(anchor.get("hf_bs32")),
            "",
            f"{_num(_ratio(bs32, f.get('hf_static_bs32_output_tokens_per_s')), 2)}x hf",
            "",
        ),
        (
            "prefill 2048 tok/s",
            _num(prefill, 0),
            _num(hf_prefill, 0),
            _num(anchor.get("hf_prefill"), 0),
            _num(f.get("floor_prefill_2048_tokens_per_s"), 0),
            f"{_num(_ratio(prefill, hf_prefill), 2)}x hf",
            ">= 1.5x hf",
        ),
        (
            "batch128 decode step ms, run estimate (512 in, 128 out)",
            _num(step, 2),
            "",
            "",
            _num(step_floor, 2),
            f"{_num(_ratio(step, step_floor), 2)}x floor",
            "<= 1.6x floor",
        ),
        (
            "batch128 decode graph replay ms (one pure decode step)",
            _num(f.get("engine_batch128_graph_replay_ms"), 2),
            "",
            "",
            _num(step_floor, 2),
            f"{_num(_ratio(f.get('engine_batch128_graph_replay_ms'), step_floor), 2)}x floor",
            "<= 1.6x floor",
        ),
        (
            "batch128 decode step ms, the run's median GPU span",
            _num(f.get("engine_batch128_step_span_p50_ms"), 2),
            "",
            "",
            _num(step_floor, 2),
            f"{_num(_ratio(f.get('engine_batch128_step_span_p50_ms'), step_floor), 2)}x floor",
            "<= 1.6x floor",
        ),
        (
            "batch128 out tok/s",
            _num(f.get("engine_batch128_output_tokens_per_s")),
            _num(f.get("hf_batch128_output_tokens_per_s")),
            "",
            _num(f.get("engine_batch128_floor_output_tokens_per_s")),
            "",
            "",
        ),
    ]


def offline_rows(f: dict, admission_batch: int = 1) -> list[tuple[str, ...]]:
    out = f.get("engine_offline_output_tokens_per_s")
    floor = f.get("engine_offline_floor_output_tokens_per_s")
    return [
        (
            f"offline {_num(f.get('engine_offline_requests'), 0)} req out tok/s, admission batch {admission_batch}",
            _num(out, 0),
            "",
            "",
            _num(floor, 0),
            f"{_num(_ratio(out, floor), 2)} of floor",
            ">= 10,000 tok/s",
        ),
        ("offline GPU idle fraction", _num(f.get("engine_offline_gpu_idle_fraction"), 3), "", "", "", "", ""),
    ]


def summarize(paths: list[Path]) -> str:
    header = ("figure", "engine", "transformers", "issue anchor", "floor", "ratio", "goal")
    lines = []
    for path in paths:
        if not path.is_file():
            lines.append(f"\n{path.name}: missing (step skipped or cut before the engine finished)")
            continue
        report = json.loads(path.read_text())
        f = report["figures"]
        model = report.get("model", {})
        name = model.get("name", "")
        lines.append(
            f"\n{path.stem} ({name}): {model.get('total_parameters', 0) / 1e9:.2f} B total, "
            f"{model.get('active_parameters', 0) / 1e9:.2f} B active, "
            f"{model.get('kv_bytes_per_token', 0):,} KV bytes/token; {report.get('hardware', '?')}; "
            f"copy {_num(f.get('copy_TB_per_s'), 2)} TB/s, matmul {_num(f.get('matmul_TFLOP_per_s'), 0)} TFLOP/s"
        )
        offline = "-offline" in path.stem
        rows = offline_rows(f, report.get("admission_batch", 1)) if offline else shape_rows(name, f)
        widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
        for row in [header, *rows]:
            lines.append("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)))
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    print(summarize([Path(a) for a in argv]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
