"""measurement/ is imported by the engine bench, the gateway bench, the control plane and the Locust
files, so it imports nothing of them (nor anything outside the standard library)."""

import ast
import sys
from pathlib import Path

import measurement

PACKAGE = Path(measurement.__file__).parent


def test_measurement_imports_only_the_standard_library_and_itself():
    imported = set()
    for path in PACKAGE.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                imported |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                imported.add(node.module.split(".")[0])
    assert imported, "no import found: the walk is broken"
    outside = {name for name in imported if name != "measurement" and name not in sys.stdlib_module_names}
    assert outside == set()
