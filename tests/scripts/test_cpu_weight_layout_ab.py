"""scripts/cpu_weight_layout_ab.py: both layouts in one process, rounds alternating, the ratio printed."""

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_rounds_alternate_the_layouts_and_print_the_median_ratio():
    result = subprocess.run(
        [sys.executable, "scripts/cpu_weight_layout_ab.py", "--random-arch", "tiny-llama", "--rounds", "2"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    rounds = re.findall(r"^batch (\d+) round (\d) (auto|row-major): ([\d.]+) out tok/s$", result.stdout, re.M)
    assert [(b, r, layout) for b, r, layout, _ in rounds] == [
        (b, r, layout) for b in ("1", "16") for r in ("1", "2") for layout in ("auto", "row-major")
    ]
    assert all(float(rate) > 0 for *_, rate in rounds)
    assert len(re.findall(r"^batch (1|16): auto / row-major median [\d.]+", result.stdout, re.M)) == 2
