"""Point a launch-configuration module (``kernels.gemv_configs``, ``kernels.fused_moe_configs``) at a
table file of the test's own, with its cached tables dropped on the way in and out."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType

import pytest


@contextmanager
def table_at(module: ModuleType, path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setattr(module, "_table_path", str(path))
    module.load_table.cache_clear()
    try:
        yield path
    finally:
        module.load_table.cache_clear()
