"""`chassis --help` lists every registered subcommand, and each has its own --help."""

import argparse
import subprocess
import sys
from importlib.metadata import version

import pytest

from chassis.main import _available, build_parser


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


def _options_without_help(parser: argparse.ArgumentParser, path: str):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _options_without_help(sub, f"{path} {name}")
        elif not isinstance(action, argparse._HelpAction) and not action.help:
            yield path, action.option_strings or action.dest


def test_every_option_of_every_command_is_explained():
    assert list(_options_without_help(build_parser(), "chassis")) == []


def test_version():
    result = _chassis("--version")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"chassis {version('chassis')}"


@pytest.mark.parametrize(
    "argv",
    [
        ("bench", "engine", "--model", "/nonexistent/model"),
        ("serve", "/nonexistent/model"),
    ],
)
def test_a_missing_checkpoint_is_one_line_not_a_traceback(argv):
    result = _chassis(*argv)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert result.stderr.strip() == f"chassis {argv[0]}: /nonexistent/model: no such file or directory"


def test_a_directory_that_is_not_a_checkpoint_is_named(tmp_path):
    result = _chassis("bench", "engine", "--model", str(tmp_path), "--device", "cpu")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert f"{tmp_path}: is not a checkpoint (no config.json, no .gguf file)" in result.stderr
