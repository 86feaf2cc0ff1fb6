"""`platform/` is a plain folder: nothing may shadow the standard library's `platform` module."""

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_repo_root_imports_stdlib_platform():
    out = subprocess.run(
        [sys.executable, "-c", "import platform; print(platform.__file__); print(platform.system())"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split("\n")
    assert Path(out[0]).parent != REPO / "platform"
    assert out[1] == "Linux"


def test_manage_py_keeps_stdlib_platform():
    script = "import platform; print(platform.system(), platform.__file__)"
    out = (
        subprocess.run(
            [sys.executable, "manage.py", "shell", "-c", script],
            cwd=REPO,
            capture_output=True,
            text=True,
            check=True,
        )
        .stdout.strip()
        .splitlines()[-1]
    )  # Django's shell may first report its automatic imports
    system, path = out.split(" ", 1)
    assert system == "Linux"
    assert not Path(path).is_relative_to(REPO / "platform")


def test_no_platform_package_marker():
    assert not (REPO / "platform" / "__init__.py").exists()
