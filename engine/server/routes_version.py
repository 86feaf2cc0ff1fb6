"""GET /version: what this replica runs, as the control plane records it with each benchmark run.

Read-only and unauthenticated like /health: versions and engine options, no data. torch and triton
are package versions (triton is absent on CPU-only hosts, the driver where no NVIDIA GPU is).
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import json
import platform
import re
import subprocess
from functools import cache
from pathlib import Path

from fastapi import APIRouter, Request

from engine.checkpoint.model_config import checkpoint_dtype
from engine.server.http import server_state

router = APIRouter()
REPO = Path(__file__).resolve().parents[2]


def engine_config_dict(config) -> dict:
    """An EngineConfig as JSON values (paths as strings)."""
    values = dataclasses.asdict(config)
    return {name: str(value) if isinstance(value, Path) else value for name, value in values.items()}


def _package_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


@cache
def code_revision() -> str:
    """``git describe`` of the checkout the engine runs from, else the package version."""
    try:
        described = subprocess.run(
            ["git", "describe", "--always", "--dirty", "--tags"],
            cwd=REPO, capture_output=True, text=True, timeout=5, check=True,
        ).stdout.strip()  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        described = ""
    return described or f"chassis {_package_version('chassis') or 'unknown'}"


def cuda_driver(proc_file: Path = Path("/proc/driver/nvidia/version")) -> str | None:
    """The NVIDIA kernel driver's version, read without importing torch into the server process."""
    try:
        text = proc_file.read_text()
    except OSError:
        return None
    match = re.search(r"Kernel Module(?: for \S+)?\s+(\d+(?:\.\d+)+)", text)
    return match.group(1) if match else None


def resolved_dtype(engine_config: dict, model_dir: str) -> str | None:
    """The configured dtype, or the checkpoint's when the option is ``auto``."""
    dtype = engine_config.get("dtype")
    if dtype and dtype != "auto":
        return dtype
    try:
        return checkpoint_dtype(json.loads((Path(model_dir) / "config.json").read_text()))
    except (OSError, ValueError):
        return None


@cache
def software_versions() -> dict:
    return {
        "engine": _package_version("chassis"),
        "torch": _package_version("torch"),
        "triton": _package_version("triton"),
        "cuda_driver": cuda_driver(),
        "python": platform.python_version(),
        "code_revision": code_revision(),
    }


@router.get("/version")
async def version(request: Request) -> dict:
    state = server_state(request)
    engine_config = dict(state.settings.engine_config)
    return {
        **software_versions(),
        "model": state.model_name,
        "replica_id": state.settings.replica_id,
        "dtype": resolved_dtype(engine_config, state.settings.model_dir),
        "engine_config": engine_config,
    }
