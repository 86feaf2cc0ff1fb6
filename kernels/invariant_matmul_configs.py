"""Tile configs of ``kernels/invariant_matmul.py``: the reference rule, and a measured table by row count.

On an H200 every tile config of the invariant GEMM (BLOCK_M 16-128, BLOCK_N 16-256, BLOCK_K 64-256,
4 or 8 warps, 3-4 stages) gives a row the same bits: each output element is the MMA's k16 steps
chained in ascending K order, whatever the tiles (``scripts/gpu/probe_invariant_gemm.py``,
docs/runs/2026-12-03-h200-session14/probe.log). So the config may follow the row count (narrow
tiles stream the weight at one row, 128x128 tiles reuse it at 2,048) without a row's bits following
it. That is a property of a compiler and a GPU, not a law: a table entry is used only after
``verify_table`` has seen it give the reference config's bits in this process, on this device (the
engine runs it when it builds in batch-invariant mode). Without a verified entry the reference runs.

The table (``kernels/invariant_matmul_table.json``) maps (dtype, N, K, row bucket) to the fastest
config that matched the reference; ``scripts/gpu/tune_invariant_matmul.py --write-table`` writes it on
the target GPU. A table measured on another device name is ignored.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from kernels._common import next_power_of_2, use_triton
from kernels._config_table import device_name, read_table_file, write_table_file

__all__ = [
    "BLOCK_K",
    "BLOCK_M",
    "ROW_BUCKETS",
    "MatmulConfig",
    "MatmulTable",
    "VerifyReport",
    "config_for",
    "load_table",
    "reference_config",
    "row_bucket",
    "verify_table",
]

log = logging.getLogger(__name__)

DEFAULT_TABLE = Path(__file__).with_name("invariant_matmul_table.json")
_table_path: str | None = None  # tests point it at a table of their own (tests/support/launch_tables.py)
ROW_BUCKETS = tuple(1 << i for i in range(14))  # 1 .. 8192 rows; more rows take the last bucket's config
VERIFY_MAX_ROWS = 256  # rows of the random input that checks an entry of a larger bucket
TABLE_DTYPES = (torch.bfloat16, torch.float16)  # fp32 (exact fp32 products) always runs the reference


@dataclass(frozen=True)
class MatmulConfig:
    block_m: int
    block_n: int
    block_k: int
    num_warps: int = 4
    num_stages: int = 4

    def label(self) -> str:
        return f"{self.block_m}x{self.block_n}x{self.block_k}/{self.num_warps}/{self.num_stages}"

    @classmethod
    def parse(cls, label: str) -> MatmulConfig:
        """The config ``label()`` wrote: ``MxNxK/warps/stages``."""
        tiles, warps, stages = label.split("/")
        m, n, k = (int(v) for v in tiles.split("x"))
        return cls(m, n, k, int(warps), int(stages))


BLOCK_M = 64  # one warpgroup's MMA height
BLOCK_K = 128
# Output widths up to this get 32-column slabs: at batch 1 a 4,096-wide projection then spreads over
# 128 programs instead of 64, nearer to filling an H200's 132 SMs with weight streams.
_NARROW_N = 8192


def reference_config(n: int, k: int) -> MatmulConfig:
    """The config of a weight ``[n, k]`` without a verified table entry: a function of the weight
    alone, never of the row count, so its rows are invariant on any GPU."""
    del k  # the K loop has the same BLOCK_K steps for every width
    return MatmulConfig(BLOCK_M, 32 if n <= _NARROW_N else 64, BLOCK_K)


Key = tuple[str, int, int, int]  # (dtype name, n, k, row bucket)


class MatmulTable:
    def __init__(self, device: str, entries: dict[Key, MatmulConfig]) -> None:
        self.device = device
        self.entries = entries

    @classmethod
    def load(cls, path: Path) -> MatmulTable:
        device, rows = read_table_file(path)
        entries = {(e["dtype"], e["n"], e["k"], e["rows"]): MatmulConfig(**e["config"]) for e in rows}
        return cls(device, entries)

    def save(self, path: Path, extra: dict | None = None) -> None:
        entries = [
            {"dtype": dtype, "n": n, "k": k, "rows": rows, "config": asdict(config)}
            for (dtype, n, k, rows), config in sorted(self.entries.items())
        ]
        write_table_file(path, self.device, entries, extra)


def row_bucket(rows: int) -> int:
    """The smallest bucket holding ``rows``; more rows than the last bucket take that one."""
    return min(next_power_of_2(rows), ROW_BUCKETS[-1])


@functools.lru_cache(maxsize=4)
def load_table(path: str) -> MatmulTable | None:
    return MatmulTable.load(Path(path)) if Path(path).is_file() else None


# (device, dtype, n, k, row bucket) -> a table config this process has seen match the reference.
_verified: dict[tuple[torch.device, torch.dtype, int, int, int], MatmulConfig] = {}


def config_for(dtype: torch.dtype, n: int, k: int, rows: int, device: torch.device) -> MatmulConfig:
    """The config a product of ``rows`` rows runs: the verified table entry, else the reference.
    ``device``: the tensors' own (``cuda:0``, as verified; a bare ``cuda`` finds no entry)."""
    config = _verified.get((device, dtype, n, k, row_bucket(rows)))
    return config if config is not None else reference_config(n, k)


Runner = Callable[[torch.Tensor, torch.Tensor, MatmulConfig], torch.Tensor]


def _run_kernel(x: torch.Tensor, weight: torch.Tensor, config: MatmulConfig) -> torch.Tensor:
    from kernels.invariant_matmul import invariant_matmul  # it imports this module for config_for

    return invariant_matmul(x, weight, config=config)


@dataclass
class VerifyReport:
    verified: int = 0
    dropped: list[str] = field(default_factory=list)  # "dtype NxK rows<=bucket config" of each

    def summary(self) -> str:
        dropped = f" ({'; '.join(self.dropped)})" if self.dropped else ""
        return f"{self.verified} table entries verified, {len(self.dropped)} dropped{dropped}"


def verify_table(weights: Iterable[torch.Tensor], run: Runner = _run_kernel) -> VerifyReport:
    """Check every table entry of each distinct (dtype, N, K) among ``weights`` on their device: a
    random input of min(bucket, 256) rows through the entry's config and the reference's. Bitwise
    equal: ``config_for`` returns the entry from now on; otherwise it is dropped, with a warning."""
    report = VerifyReport()
    table = load_table(_table_path or str(DEFAULT_TABLE))
    seen: set[tuple] = set()
    for weight in weights:
        n, k = weight.shape
        shape = (weight.device, weight.dtype, n, k)
        if table is None or shape in seen or weight.dtype not in TABLE_DTYPES or not use_triton(weight):
            continue
        seen.add(shape)
        if table.device != device_name(weight.device):
            continue
        name = str(weight.dtype).removeprefix("torch.")
        generator = torch.Generator(weight.device).manual_seed(0)
        buckets = sorted(b for (d, tn, tk, b) in table.entries if (d, tn, tk) == (name, n, k))
        for bucket in buckets:
            config = table.entries[(name, n, k, bucket)]
            rows = min(bucket, VERIFY_MAX_ROWS)
            x = torch.randn(rows, k, generator=generator, device=weight.device).to(weight.dtype)
            if torch.equal(run(x, weight, config), run(x, weight, reference_config(n, k))):
                _verified[(*shape, bucket)] = config
                report.verified += 1
            else:
                _verified.pop((*shape, bucket), None)
                entry = f"{name} {n}x{k} rows<={bucket} {config.label()}"
                report.dropped.append(entry)
                log.warning("invariant GEMM: table entry %s differs from the reference here; dropped", entry)
    return report
