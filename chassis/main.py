"""Entry point of the ``chassis`` console script.

Each subcommand lives in its own module exposing ``HELP`` (one line), ``add_arguments(parser)``
and ``run(args) -> int``. Modules keep heavy imports (torch, Django) inside ``run`` so that
``chassis --help`` stays instant.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# name -> module; add a line here to register a new subcommand.
SUBCOMMANDS: dict[str, str] = {
    "up": "chassis.up",
    "make-tiny-model": "chassis.make_tiny_model",
    "serve": "chassis.serve",
    "gateway": "chassis.gateway",
    "agent": "chassis.agent",
    "bench": "chassis.bench",
    "dashboards": "chassis.dashboards",
}


def _available() -> dict[str, object]:
    modules = {}
    for name, module_name in SUBCOMMANDS.items():
        try:
            modules[name] = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name != module_name:
                raise
    return modules


def version() -> str:
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed_version

    try:
        return installed_version("chassis")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed)"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="chassis",
        description="Chassis: operate LLM inference in production (control plane, engine, gateway).",
    )
    parser.add_argument("--version", action="version", version=f"chassis {version()}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, module in _available().items():
        sub = subparsers.add_parser(name, help=module.HELP, description=module.HELP)
        module.add_arguments(sub)
        sub.set_defaults(_run=module.run)
    return parser


def user_error(exc: BaseException) -> str | None:
    """The one-line message for an error the user can fix (a missing file, a bad checkpoint or
    option), None for anything else: a bug keeps its traceback."""
    from engine.checkpoint.errors import CheckpointError
    from engine.config_cli import OptionError
    from engine.device_runtime import DeviceUnavailable

    if isinstance(exc, (CheckpointError, OptionError, DeviceUnavailable)):
        return str(exc)
    if isinstance(exc, (FileNotFoundError, NotADirectoryError, IsADirectoryError, PermissionError)):
        return f"{exc.filename}: {exc.strerror}" if exc.filename else str(exc)
    return None


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args._run(args) or 0)
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        message = user_error(exc)
        if message is None:
            raise
        print(f"chassis {args.command}: {message}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
