"""The JSON file of a measured launch table (``kernels/gemv_table.json``, ``kernels/fused_moe_table.json``):
the name of the device it was measured on and one object per entry. A table is used only on a device
of that name."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import torch


def read_table_file(path: Path) -> tuple[str, list[dict]]:
    """The device name and the entries of the table file at ``path``."""
    data = json.loads(Path(path).read_text())
    return data["device"], data["entries"]


def write_table_file(path: Path, device: str, entries: list[dict], extra: dict | None = None) -> None:
    """Write ``entries`` measured on ``device``; ``extra`` fields (versions, dates) go beside them."""
    Path(path).write_text(json.dumps({"device": device, **(extra or {}), "entries": entries}, indent=1))


@functools.lru_cache(maxsize=8)
def device_name(device: torch.device) -> str:
    """The name a table's ``device`` must equal: the GPU's marketing name, or the device type."""
    if device.type != "cuda":
        return device.type
    return torch.cuda.get_device_name(device)
