"""Parse the device table printed by Huawei's ``npu-smi info``.

Each device takes two table rows: ``| NPU  Name | Health | Power Temp Hugepages |`` then
``| Chip | Bus-Id | AICore Memory-Usage HBM-Usage |``; HBM is the last ``used / total`` pair (MB).
The process table that follows (header ``| NPU  Chip | Process id |``) is ignored.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_USED_TOTAL = re.compile(r"(\d+)\s*/\s*(\d+)")


@dataclass(frozen=True)
class NpuDevice:
    npu_id: int
    chip_id: int
    name: str
    health: str
    hbm_total_mb: int
    hbm_used_mb: int


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def parse_npu_smi_info(text: str) -> list[NpuDevice]:
    devices: list[NpuDevice] = []
    pending: tuple[int, str, str] | None = None  # (npu id, name, health) waiting for its chip row
    for line in text.splitlines():
        if not line.startswith("|"):
            continue
        cells = _cells(line)
        if "Process id" in line or cells[0].startswith("No running"):
            break
        if len(cells) < 3 or cells[0].startswith(("NPU", "Chip")):
            continue
        first = cells[0].split()
        if pending is None and len(first) >= 2 and first[0].isdigit():
            pending = (int(first[0]), " ".join(first[1:]), cells[1])
        elif pending is not None and len(first) == 1 and first[0].isdigit():
            pairs = _USED_TOTAL.findall(cells[2])
            used, total = (int(pairs[-1][0]), int(pairs[-1][1])) if pairs else (0, 0)
            devices.append(NpuDevice(pending[0], int(first[0]), pending[1], pending[2], total, used))
            pending = None
    return devices
