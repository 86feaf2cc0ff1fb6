#!/usr/bin/env python
"""Django's command-line utility for the Chassis control plane."""

import os
import sys
from pathlib import Path

# The project package lives in platform/ (a plain folder, not a package: a package named
# `platform` would shadow the standard library). Append, never prepend, for the same reason.
PLATFORM_DIR = str(Path(__file__).resolve().parent / "platform")
if PLATFORM_DIR not in sys.path:
    sys.path.append(PLATFORM_DIR)


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
