"""`chassis --help` lists every registered subcommand, and each has its own --help."""

import subprocess
import sys

import pytest

from chassis.main import _available


def _chassis(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "chassis", *args], capture_output=True, text=True, timeout=120
    )


def test_help_lists_subcommands():
    result = _chassis("--help")
    assert result.returncode == 0, result.stderr
    assert "up" in result.stdout
    for name in _available():
        assert name in result.stdout


@pytest.mark.parametrize("name", sorted(_available()))
def test_each_subcommand_has_help(name):
    result = _chassis(name, "--help")
    assert result.returncode == 0, result.stderr
    assert "usage: chassis" in result.stdout


def test_unknown_subcommand_is_a_usage_error():
    result = _chassis("no-such-command")
    assert result.returncode == 2
    assert "invalid choice" in result.stderr
