"""Command-line arguments that several ``chassis`` commands share."""

from __future__ import annotations

import argparse
import os


def add_token_argument(parser: argparse.ArgumentParser, env_var: str, what: str) -> None:
    """``--token``, taken from the environment variable ``env_var`` when not given."""
    parser.add_argument("--token", default=os.environ.get(env_var), help=f"{what} (default: ${env_var})")
