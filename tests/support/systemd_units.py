"""Start a rendered systemd unit's ExecStart without systemd (containers have none): its
Environment=, EnvironmentFile= and RuntimeDirectory= applied the way systemd would, the command
optionally inside a network namespace."""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path


def unit_entries(unit: Path) -> list[tuple[str, str]]:
    entries = []
    for line in unit.read_text().splitlines():
        if "=" in line and not line.startswith(("#", "[")):
            key, value = line.split("=", 1)
            entries.append((key.strip(), value.strip()))
    return entries


def environment_file(path: Path) -> dict[str, str]:
    env = {}
    for line in path.read_text().splitlines():
        if "=" in line and not line.startswith("#"):
            key, value = line.split("=", 1)
            env[key.strip()] = value.strip()
    return env


def unit_command(unit: Path, runtime_root: Path) -> tuple[list[str], dict[str, str]]:
    """(argv, environment) of the unit; /run/<RuntimeDirectory> becomes runtime_root/<name>."""
    env = {key: os.environ[key] for key in ("PATH", "HOME", "LANG") if key in os.environ}
    argv: list[str] = []
    runtime = {}
    for key, value in unit_entries(unit):
        if key == "EnvironmentFile":
            path = Path(value.removeprefix("-"))
            if path.exists() or not value.startswith("-"):
                env.update(environment_file(path))
        elif key == "Environment":
            name, setting = value.split("=", 1)
            env[name] = setting
        elif key == "UnsetEnvironment":
            env.pop(value, None)
        elif key == "RuntimeDirectory":
            runtime[f"/run/{value}"] = runtime_root / value
        elif key == "ExecStart":
            argv = [arg.replace("%%", "%") for arg in shlex.split(value)]
    for run_path, local in runtime.items():
        local.mkdir(parents=True, exist_ok=True)
        env = {key: value.replace(run_path, str(local)) for key, value in env.items()}
    assert argv, f"no ExecStart in {unit}"
    return argv, env


def start_unit(
    unit: Path, runtime_root: Path, log_dir: Path, cwd: Path, netns: str | None = None
) -> subprocess.Popen:
    argv, env = unit_command(unit, runtime_root)
    if netns:
        argv = ["ip", "netns", "exec", netns, *argv]
    log = open(log_dir / f"{unit.stem}.log", "ab")  # noqa: SIM115 (the process keeps it)
    return subprocess.Popen(
        argv, cwd=cwd, env={**env, "PYTHONUNBUFFERED": "1"}, stdout=log, stderr=subprocess.STDOUT,
        start_new_session=True,
    )  # fmt: skip
