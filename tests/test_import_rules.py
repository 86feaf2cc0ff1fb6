"""The dependency rules of .importlinter hold on the tree, and breaking one fails the check."""

from __future__ import annotations

import configparser
import os
import pkgutil
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import engine
import engine.kv
import engine.server

REPO = Path(__file__).resolve().parents[1]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")
PACKAGES = ("engine", "kernels", "gateway", "chassis", "dashboards", "measurement", "platform/controlplane")
# What the gateway may import of the engine; every other engine module must be on its forbidden list.
GATEWAY_MAY_IMPORT = {"engine.kv.block_hash", "engine.server.protocol"}


def _lint_imports(cwd: Path, pythonpath: list[Path]) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(str(p) for p in pythonpath))
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )


def test_the_tree_keeps_every_rule():
    result = _lint_imports(REPO, [REPO, REPO / "platform"])
    assert result.returncode == 0, result.stdout + result.stderr
    assert "BROKEN" not in result.stdout


@pytest.mark.parametrize(
    ("planted_in", "line", "contract"),
    [
        ("engine/core/_planted.py", "import django\n", "The engine and its kernels never import Django"),
        ("gateway/_planted.py", "import engine.core.engine_core\n", "The gateway imports only"),
        ("platform/controlplane/_planted.py", "import engine.runner.model_runner\n", "The control plane"),
    ],
)
def test_a_rule_broken_on_purpose_fails_the_check(tmp_path, planted_in, line, contract):
    for package in PACKAGES:
        shutil.copytree(REPO / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / ".importlinter", tmp_path / ".importlinter")
    (tmp_path / planted_in).write_text(line)

    result = _lint_imports(tmp_path, [tmp_path, tmp_path / "platform"])

    assert result.returncode != 0
    assert "BROKEN" in result.stdout
    assert contract in " ".join(result.stdout.split())  # lint-imports wraps long names
    assert "_planted" in result.stdout


def _modules(package) -> set[str]:
    return {f"{package.__name__}.{m.name}" for m in pkgutil.iter_modules(package.__path__)}


def test_the_gateway_rule_names_every_engine_module_it_may_not_import():
    """A new engine module is forbidden to the gateway unless someone decides otherwise here."""
    config = configparser.ConfigParser()
    config.read(REPO / ".importlinter")
    forbidden = set(config["importlinter:contract:gateway-uses-engine-public-modules"]["forbidden_modules"].split())
    opened = {"engine.kv", "engine.server"}  # packages the gateway may import one module of
    modules = (_modules(engine) - opened) | _modules(engine.kv) | _modules(engine.server)
    assert modules - GATEWAY_MAY_IMPORT <= forbidden, sorted(modules - GATEWAY_MAY_IMPORT - forbidden)
