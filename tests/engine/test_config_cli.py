"""``chassis serve``'s engine flags come from EngineConfig's fields, and old spellings still parse."""

from __future__ import annotations

import argparse
import dataclasses

import pytest

from chassis import serve
from engine.config import EngineConfig
from engine.config_cli import add_engine_arguments, config_from_args, option_errors, option_flags

# The server's own flags (chassis/serve.py); every other `chassis serve` option is an engine field.
SERVER_OPTIONS = {
    "help",
    "host",
    "port",
    "served_model_name",
    "api_key",
    "tool_parser",
    "drain_timeout",
    "replica_id",
    "engine_in_thread",
    "log_level",
}
FIELDS = {f.name for f in dataclasses.fields(EngineConfig)}


def serve_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="chassis serve")
    serve.add_arguments(parser)
    return parser


def test_every_field_has_a_flag_and_every_engine_flag_a_field():
    dests = {action.dest for action in serve_parser()._actions}
    assert FIELDS <= dests, f"fields without a flag: {FIELDS - dests}"
    assert dests - FIELDS == SERVER_OPTIONS, f"flags without a field: {dests - FIELDS - SERVER_OPTIONS}"


def test_help_of_every_field_is_in_serve_help():
    text = " ".join(serve_parser().format_help().split())
    for f in dataclasses.fields(EngineConfig):
        assert " ".join(f.metadata["help"].split()) in text, f.name


def _other_value(f: dataclasses.Field):
    """A value of the field's type that is not its default."""
    if f.metadata["choices"]:
        others = [c for c in f.metadata["choices"] if c != f.default]
        return next((c for c in others if c != "auto"), others[0])  # "auto" only when it is the one
    if f.default is None and f.name == "async_scheduling":
        return True
    if f.name == "gemv_table":
        return "/tables/h200.json"
    if f.name == "speculative_model":
        return "/models/draft"
    if f.name in ("kv_disk_cache_dir", "kv_shared_cache_dir"):
        return "/var/cache/kv"
    if isinstance(f.default, bool):
        return not f.default
    if isinstance(f.default, float):
        return f.default / 2
    return (f.default or 0) + 3


# Settings a field's other value needs beside it to be valid.
NEEDS = {
    "kv_role": {"kv_shared_cache_dir": "/var/cache/kv"},
    # Every expert-parallel rank runs attention for its own requests: the two sizes go together.
    "expert_parallel_size": {"data_parallel_size": 4},
    "data_parallel_size": {"expert_parallel_size": 4},
}


@pytest.mark.parametrize("name", sorted(FIELDS - {"model_dir"}))
def test_every_field_round_trips_through_its_flag(name):
    f = EngineConfig.__dataclass_fields__[name]
    value = _other_value(f)
    args = serve_parser().parse_args(["/models/m", *option_flags({**NEEDS.get(name, {}), name: value})])
    config = config_from_args(args)
    assert getattr(config, name) == value
    assert str(config.model_dir) == "/models/m"
    assert getattr(config_from_args(serve_parser().parse_args(["/m"])), name) == getattr(
        EngineConfig("/m"), name
    )  # no flag: the field's default


@pytest.mark.parametrize(
    ("argv", "field", "value"),
    [
        (["--tp", "2"], "tensor_parallel_size", 2),
        (["--tensor-parallel-size", "4"], "tensor_parallel_size", 4),
        (["--no-prefix-caching"], "enable_prefix_caching", False),
        (["--no-enable-prefix-caching"], "enable_prefix_caching", False),
        (["--enable-prefix-caching"], "enable_prefix_caching", True),
        (["--enforce-eager"], "enforce_eager", True),
        (["--no-async-scheduling"], "async_scheduling", False),
    ],
)
def test_older_and_boolean_spellings(argv, field, value):
    assert getattr(config_from_args(serve_parser().parse_args(["/m", *argv])), field) == value


def test_option_flags_follow_the_field_types():
    assert option_flags({"max_num_seqs": 8, "enable_prefix_caching": False, "max_model_len": None}) == [
        "--max-num-seqs",
        "8",
        "--no-enable-prefix-caching",
    ]
    assert option_flags({"enforce_eager": True, "no_prefix_caching": True, "x": False}) == [
        "--enforce-eager",
        "--no-prefix-caching",
    ]


def test_option_errors_name_each_refused_option():
    errors = option_errors(
        {
            "no_such_flag": 1,
            "max_num_seqs": "many",
            "block_size": 0,
            "dtype": "int4",
            "enforce_eager": "yes",
            "max_model_len": True,
            "tp": 2,
            "kernels": "torch",
            "no_prefix_caching": True,
            "gemv_table": ["/a"],
        }
    )
    assert set(errors) == {
        "no_such_flag",
        "max_num_seqs",
        "block_size",
        "dtype",
        "enforce_eager",
        "max_model_len",
        "gemv_table",
    }
    assert errors["no_such_flag"] == "not an engine option of `chassis serve`"
    assert errors["max_num_seqs"] == "argument --max-num-seqs: invalid int value: 'many'"
    assert "block_size must be a positive integer" in errors["block_size"]
    assert "invalid choice: 'int4'" in errors["dtype"]
    assert errors["enforce_eager"] == "must be true or false"
    assert errors["gemv_table"] == "must be a string, number or boolean"


def test_parsing_only_what_was_given():
    parser = argparse.ArgumentParser()
    add_engine_arguments(parser, model_dir=False, defaults=False)
    assert vars(parser.parse_args(["--tp", "2", "--no-warm-up"])) == {
        "tensor_parallel_size": 2,
        "warm_up": False,
    }


def test_the_control_plane_can_check_options_without_torch():
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from engine.config_cli import option_errors\n"
        "assert option_errors({'max_num_seqs': 'many', 'kernels': 'torch'})\n"
        "assert 'torch' not in sys.modules, 'engine.config_cli imported torch'\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
