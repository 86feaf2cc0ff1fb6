"""Launch configurations for ``kernels/fused_moe.py``: a built-in rule, and a measured table that overrides it.

The table (``kernels/fused_moe_table.json`` unless ``set_table_path`` names another) maps
(token bucket, experts, hidden, intermediate) to the tiles of both grouped GEMMs on one device; a
table measured on another device name is ignored. It is meant to be written by a benchmark on the
target GPU, as ``kernels/gemv_table.json`` is; until then it is empty and ``default_config`` rules.
Configs are never tuned at run time: a timing-driven choice would change the summation order, and
with it the logits, between server starts.

Up to ``SMALL_BATCH_MAX_PAIRS`` (token, slot) pairs a ``MoeGemvConfig`` is chosen: the small-batch path
that skips the sort and runs one GEMV per pair. A table entry of that kind (``"kind": "gemv"``) sets its
tiles for a bucket; a grouped-GEMM entry at a bucket below the threshold is not used there (the ones in
the shipped table were measured before the small-batch path existed).
"""

from __future__ import annotations

import functools
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from kernels._common import next_power_of_2
from kernels._config_table import device_name, read_table_file, write_table_file

__all__ = [
    "SMALL_BATCH_MAX_PAIRS",
    "AnyMoeConfig",
    "MoeConfig",
    "MoeGemvConfig",
    "MoeTable",
    "choose_config",
    "default_config",
    "default_gemv_config",
    "load_table",
    "set_table_path",
    "token_bucket",
    "uses_small_batch",
]

DEFAULT_TABLE = Path(__file__).with_name("fused_moe_table.json")
_table_path: str | None = None
MAX_BUCKET = 4096
# T * k at or below which fused_moe skips the sort: T <= 8 for both Qwen3-30B-A3B (k = 8) and
# DeepSeek-V2-Lite (k = 6). Not yet timed against the grouped GEMMs on an H200.
SMALL_BATCH_MAX_PAIRS = 64
# A table entry measured at this close an expert count (as a share of it) serves a grouped GEMM
# without one of its own: see ``MoeTable.nearest``.
NEAR_EXPERTS = 0.125


@dataclass(frozen=True)
class MoeConfig:
    """Tiles shared by both GEMMs: ``block_m`` sorted (token, slot) rows per program (the padding unit
    of every expert's row list), ``block_n`` output columns (the gate/up GEMM's weight tile is twice
    that wide: gate and up rows interleaved), ``block_k`` reduction step."""

    block_m: int
    block_n: int
    block_k: int
    num_warps: int = 4
    num_stages: int = 3

    def __post_init__(self) -> None:
        for name in ("block_m", "block_n", "block_k"):
            value = getattr(self, name)
            if value < 16 or value & (value - 1):
                raise ValueError(f"{name} must be a power of two >= 16 (tl.dot), got {value}")


@dataclass(frozen=True)
class MoeGemvConfig:
    """The small-batch path's tiles: ``up_block_n`` intermediate columns per gate/up program,
    ``down_block_n`` hidden columns per down program, ``block_k`` reduction lanes (capped at the
    reduction's length rounded up to a power of two). Each lane sums its own products across the K
    steps and the lanes are added once at the end, so ``block_k`` alone fixes the bits; the column
    tiles, warps and stages change only the speed."""

    up_block_n: int = 8
    down_block_n: int = 8
    block_k: int = 256
    num_warps: int = 4
    num_stages: int = 2


AnyMoeConfig = MoeConfig | MoeGemvConfig


class MoeTable:
    """Entries keyed ``(token bucket, experts, hidden, intermediate)`` for one device name."""

    def __init__(self, device: str, entries: dict[tuple[int, int, int, int], AnyMoeConfig]) -> None:
        self.device = device
        self.entries = entries

    @classmethod
    def load(cls, path: Path) -> MoeTable:
        device, rows = read_table_file(path)
        entries = {
            (e["tokens"], e["experts"], e["hidden"], e["inter"]): (
                MoeGemvConfig if e.get("kind") == "gemv" else MoeConfig
            )(**e["config"])
            for e in rows
        }
        return cls(device, entries)

    def nearest(self, bucket: int, experts: int, hidden: int, inter: int) -> MoeConfig | None:
        """A grouped-GEMM entry of the same bucket and GEMM shapes whose expert count is within
        ``NEAR_EXPERTS`` of ``experts`` (the closest; the fewer experts on a tie), or None. Shared
        experts fused as routed ones add a few slots (DeepSeek-V2-Lite: 64 + 2) to a table measured
        without them: the products and rows per expert are nearly the same."""
        found = [
            (abs(e - experts), e, config)
            for (t, e, h, i), config in self.entries.items()
            if (t, h, i) == (bucket, hidden, inter)
            and isinstance(config, MoeConfig)
            and abs(e - experts) <= NEAR_EXPERTS * experts
        ]
        return min(found, key=lambda f: f[:2])[2] if found else None

    def save(self, path: Path, extra: dict | None = None) -> None:
        entries = [
            {"tokens": t, "experts": e, "hidden": h, "inter": i, "config": asdict(config)}
            | ({"kind": "gemv"} if isinstance(config, MoeGemvConfig) else {})
            for (t, e, h, i), config in sorted(self.entries.items())
        ]
        write_table_file(path, self.device, entries, extra)


def token_bucket(tokens: int) -> int:
    """Tokens rounded up to a power of two, capped at ``MAX_BUCKET`` (larger batches share its tiles)."""
    return min(next_power_of_2(max(tokens, 1)), MAX_BUCKET)


def set_table_path(path: str | Path | None) -> str | None:
    """Read MoE choices from ``path`` (None: the built-in table); returns the previous setting."""
    global _table_path
    previous, _table_path = _table_path, (str(path) if path is not None else None)
    return previous


@functools.lru_cache(maxsize=4)
def load_table(path: str) -> MoeTable | None:
    return MoeTable.load(Path(path)) if Path(path).is_file() else None


def default_config(tokens: int, top_k: int, experts: int) -> MoeConfig:
    """The rule without a table entry, from the mean rows per expert: at decode sizes most experts get
    a handful of rows, so a 16-row tile wastes least padding and the GEMMs stream weights; prefill
    batches fill 64-row tiles and reuse each weight tile across them. Not yet timed on an H200; each
    compiles for sm_90 without register spills (ptxas -v), which 64x128 and 4-warp 16x64x128 did not."""
    rows_per_expert = tokens * top_k / max(experts, 1)
    if rows_per_expert <= 16:
        return MoeConfig(block_m=16, block_n=64, block_k=128, num_warps=8, num_stages=3)
    if rows_per_expert <= 64:
        return MoeConfig(block_m=32, block_n=64, block_k=64, num_warps=8, num_stages=4)
    return MoeConfig(block_m=64, block_n=64, block_k=64, num_warps=8, num_stages=3)


def default_gemv_config() -> MoeGemvConfig:
    """The small-batch tiles without a table entry; not yet timed on an H200. ptxas -v for sm_90, bf16:
    the gate/up kernel (two weight streams) takes 128 registers at 8 x 256 against 253 at 16 x 256,
    the down kernel 54, no spills. At T = 1 that is (k * inter / 8) gate/up programs and hidden / 8
    down programs (768 and 256 for Qwen3-30B-A3B), each streaming rows of 512 contiguous bytes."""
    return MoeGemvConfig()


def uses_small_batch(tokens: int, top_k: int) -> bool:
    """Whether ``choose_config`` picks the small-batch path: it depends on the batch shape alone."""
    return tokens * top_k <= SMALL_BATCH_MAX_PAIRS


def choose_config(
    tokens: int, top_k: int, experts: int, hidden: int, inter: int, device: torch.device
) -> AnyMoeConfig:
    small = uses_small_batch(tokens, top_k)
    table = load_table(_table_path or str(DEFAULT_TABLE))
    if table is not None and table.device == device_name(device):
        bucket = token_bucket(tokens)
        entry = table.entries.get((bucket, experts, hidden, inter))
        if entry is None and not small:
            entry = table.nearest(bucket, experts, hidden, inter)
        if entry is not None and isinstance(entry, MoeGemvConfig) == small:
            return entry
    return default_gemv_config() if small else default_config(tokens, top_k, experts)
