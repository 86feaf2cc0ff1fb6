"""Launch configurations for ``kernels/gemv.py``: a built-in rule, and a measured table that overrides it.

The table is written by ``scripts/gpu/bench_decode_kernels.py --write-table`` on the target GPU: for
every (row bucket, N, K, gated, normed) it records the fastest Triton config and whether it beat cuBLAS.
Configs are never tuned at run time (no ``triton.autotune``): a timing-noise-driven choice would
change the reduction order, and with it the logits, from one server start to the next.

The table read is the one ``set_table_path`` names (the engine sets ``EngineConfig.gemv_table`` when
it builds), else ``kernels/gemv_table.json`` if it exists; a table measured on another device name
is ignored.
"""

from __future__ import annotations

import functools
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from kernels._common import next_power_of_2, num_compute_units
from kernels._config_table import device_name, read_table_file, write_table_file

__all__ = [
    "GemvConfig",
    "GemvTable",
    "TableEntry",
    "candidate_configs",
    "choose_config",
    "default_config",
    "load_table",
    "row_bucket",
    "set_table_path",
    "table_entry",
    "table_path",
]

DEFAULT_TABLE = Path(__file__).with_name("gemv_table.json")
_table_path: str | None = None
ROW_BUCKETS = (1, 2, 4, 8)


@dataclass(frozen=True)
class GemvConfig:
    """One launch: ``block_n`` output rows per program, ``block_k`` input columns per step.

    ``use_dot``: tensor-core ``tl.dot`` with the input rows padded to 16 (one compile serves every
    row count); otherwise fp32 FMAs, for a single input row only. ``split_k`` > 1: the K range is
    cut into that many parts whose fp32 partial sums a second kernel adds in order.
    """

    block_n: int
    block_k: int
    num_warps: int = 4
    num_stages: int = 4
    split_k: int = 1
    use_dot: bool = True

    def label(self) -> str:
        kind = "dot" if self.use_dot else "fma"
        split = f" split{self.split_k}" if self.split_k > 1 else ""
        return f"{kind} n{self.block_n} k{self.block_k} w{self.num_warps} s{self.num_stages}{split}"


@dataclass(frozen=True)
class TableEntry:
    backend: str  # "triton" or "cublas": which one measured faster
    config: GemvConfig


class GemvTable:
    """Entries keyed ``(rows bucket, n, k, gated, normed)``; a 4-tuple key means ``normed=False``.

    ``normed``: the RMSNorm-prologue variant (``kernels/gemv_norm.py``)."""

    def __init__(self, device: str, entries: dict[tuple, TableEntry]) -> None:
        self.device = device
        self.entries = {key if len(key) == 5 else (*key, False): e for key, e in entries.items()}

    @classmethod
    def load(cls, path: Path) -> GemvTable:
        device, rows = read_table_file(path)
        entries = {
            (e["rows"], e["n"], e["k"], e["gated"], e.get("normed", False)): TableEntry(
                e["backend"], GemvConfig(**e["config"])
            )
            for e in rows
        }
        return cls(device, entries)

    def save(self, path: Path, extra: dict | None = None) -> None:
        entries = [
            {
                "rows": rows,
                "n": n,
                "k": k,
                "gated": gated,
                "normed": normed,
                "backend": e.backend,
                "config": asdict(e.config),
            }
            for (rows, n, k, gated, normed), e in sorted(self.entries.items())
        ]
        write_table_file(path, self.device, entries, extra)


def row_bucket(rows: int) -> int:
    if not 1 <= rows <= ROW_BUCKETS[-1]:
        raise ValueError(f"the GEMV takes 1 to {ROW_BUCKETS[-1]} rows, got {rows}")
    return next_power_of_2(rows)


def set_table_path(path: str | Path | None) -> str | None:
    """Read GEMV choices from ``path`` (None: the built-in table); returns the previous setting."""
    global _table_path
    previous, _table_path = _table_path, (str(path) if path is not None else None)
    return previous


def table_path() -> str | None:
    """The table set by ``set_table_path``; None for the built-in one."""
    return _table_path


@functools.lru_cache(maxsize=4)
def load_table(path: str) -> GemvTable | None:
    return GemvTable.load(Path(path)) if Path(path).is_file() else None


def table_entry(
    rows: int, n: int, k: int, gated: bool, device: torch.device, normed: bool = False
) -> TableEntry | None:
    """The measured choice for this shape on this device, if the table has one. A ``normed`` shape
    not measured itself falls back to the plain GEMV's entry (same weight stream, same tiles)."""
    table = load_table(_table_path or str(DEFAULT_TABLE))
    if table is None or table.device != device_name(device):
        return None
    key = (row_bucket(rows), n, k, gated)
    if normed and (*key, True) in table.entries:
        return table.entries[(*key, True)]
    return table.entries.get((*key, False))


def _split_for(programs: int, k: int, block_k: int, num_sms: int) -> int:
    """Enough K splits to give every SM a program, keeping >= 2 K-steps per split."""
    split = 1
    while programs * split < num_sms and k >= 2 * block_k * (2 * split) and split < 8:
        split *= 2
    return split


def default_config(rows: int, n: int, k: int, num_sms: int) -> GemvConfig:
    """The rule used without a table entry: tensor-core path, narrow slabs for narrow outputs so
    there are >= ~2 programs per SM, K split only when there are fewer programs than SMs."""
    del rows  # one config for every row count keeps rows bit-identical across batch sizes 1..8
    block_n = 16 if n <= 8192 else 32 if n <= 16384 else 64
    block_k = min(256 if block_n < 64 else 128, max(16, next_power_of_2(k)))
    split = _split_for(-(-n // block_n), k, block_k, num_sms)
    return GemvConfig(block_n, block_k, num_warps=4, num_stages=4, split_k=split)


def choose_config(
    rows: int, n: int, k: int, gated: bool, device: torch.device, normed: bool = False
) -> GemvConfig:
    entry = table_entry(rows, n, k, gated, device, normed)
    if entry is not None:
        return entry.config
    return default_config(rows, n, k, num_compute_units(device))


# (block_n, block_k, num_warps, num_stages) tried by the benchmark. The tensor-core ones serve every
# row count with one compile; the FMA ones take a single row.
_DOT_TILES = (
    (16, 256, 4, 4),
    (16, 512, 4, 3),
    (32, 256, 4, 4),
    (64, 128, 4, 4),
    (64, 256, 4, 3),
    (128, 128, 8, 3),
)
_FMA_TILES = ((8, 512, 4, 2), (16, 256, 4, 2), (32, 128, 4, 2))


def candidate_configs(rows: int, n: int, k: int, num_sms: int) -> list[GemvConfig]:
    """Configs worth timing for one shape: the default, every tile (K step capped at K's size),
    unsplit and, where there are too few programs to fill the GPU twice, split 2 and 4 ways."""
    tiles = [(tile, True) for tile in _DOT_TILES]
    if rows == 1:
        tiles += [(tile, False) for tile in _FMA_TILES]
    configs = [default_config(rows, n, k, num_sms)]
    for (block_n, block_k, warps, stages), use_dot in tiles:
        block_k = min(block_k, max(16, next_power_of_2(k)))
        programs = -(-n // block_n)
        splits = [1] + [s for s in (2, 4) if programs < 2 * num_sms and k >= 2 * s * block_k]
        configs += [GemvConfig(block_n, block_k, warps, stages, s, use_dot) for s in splits]
    return list(dict.fromkeys(configs))
