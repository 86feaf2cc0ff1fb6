"""Where each mode's time went, from a speculative grid run with ``--trace-steps``.

Per point and mode: the plain and verify steps (count, mean wall ms, mean of the policy's prediction
where it had one, wall over predicted), and the drain: the steps that ran with fewer requests than
the batch (the end of a wave, where requests finished at different steps) and their share of the
mode's step time.

    python3 -m engine.bench.grid_trace OUT/grid.json
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path

TOKENS, DRAFTS, REQUESTS, WALL_MS, PREDICTED_MS = range(5)


@dataclass
class StepKind:
    steps: int = 0
    wall_ms: float = 0.0
    predicted_steps: int = 0
    predicted_ms: float = 0.0
    wall_when_predicted_ms: float = 0.0

    def add(self, step: list) -> None:
        self.steps += 1
        self.wall_ms += step[WALL_MS]
        if step[PREDICTED_MS] is not None:
            self.predicted_steps += 1
            self.predicted_ms += step[PREDICTED_MS]
            self.wall_when_predicted_ms += step[WALL_MS]

    def describe(self) -> str:
        if not self.steps:
            return "-"
        text = f"{self.steps} x {self.wall_ms / self.steps:.2f} ms"
        if self.predicted_steps:
            over = self.wall_when_predicted_ms / self.predicted_ms if self.predicted_ms else float("nan")
            text += f" (predicted {self.predicted_ms / self.predicted_steps:.2f}, wall/pred {over:.2f})"
        return text


def mode_summary(steps: list[list], batch_size: int) -> dict[str, StepKind | float]:
    plain, verify = StepKind(), StepKind()
    drain_ms = total_ms = 0.0
    for step in steps:
        (verify if step[DRAFTS] else plain).add(step)
        total_ms += step[WALL_MS]
        if step[REQUESTS] < batch_size:
            drain_ms += step[WALL_MS]
    return {"plain": plain, "verify": verify, "drain_share": drain_ms / total_ms if total_ms else 0.0}


def summarize(report: dict) -> str:
    lines = []
    for point in report["points"]:
        batch = point["batch_size"]
        lines.append(f"acceptance {point['acceptance']}, batch {batch}")
        for mode, result in point["modes"].items():
            steps = result.get("steps")
            if not steps:
                lines.append(f"  {mode:<10} no trace (run without --trace-steps)")
                continue
            s = mode_summary(steps, batch)
            lines.append(
                f"  {mode:<10} plain {s['plain'].describe()}; verify {s['verify'].describe()}; "
                f"drain {100 * s['drain_share']:.0f} % of step time"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("report", type=Path, help="a chassis bench speculative --grid --trace-steps JSON file")
    args = parser.parse_args(argv)
    try:
        report = json.loads(args.report.read_text())
    except (OSError, ValueError) as error:
        print(f"grid_trace: cannot read {args.report}: {error}", file=sys.stderr)
        return 2
    print(summarize(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
