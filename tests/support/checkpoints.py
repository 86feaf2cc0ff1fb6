"""Tiny checkpoints, made once per test session and shared by every test directory.

Registered for the whole suite by ``tests/conftest.py`` (``pytest_plugins``), so engine, server,
gateway, CLI and control-plane tests ask for the same fixtures instead of each building its own.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.testing.tiny_gguf import write_gguf
from engine.testing.tiny_model import ARCHES, make_tiny_model

# Different seeds per arch so llama and mistral (same shapes) do not share weights.
ARCH_SEEDS = {
    "llama": 1,
    "mistral": 2,
    "qwen2": 3,
    "qwen3": 4,
    "qwen3_moe": 5,
    "mixtral": 6,
    "deepseek_v2": 7,
    "deepseek_v3": 8,
    "gemma2": 9,
    "gemma3": 10,
}
GGUF_TWIN_ARCHES = ("llama", "qwen2", "qwen3")


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory) -> dict[str, Path]:
    """One tiny checkpoint per supported architecture."""
    root = tmp_path_factory.mktemp("tiny-models")
    return {arch: make_tiny_model(root / arch, arch=arch, seed=ARCH_SEEDS[arch]) for arch in ARCHES}


@pytest.fixture(scope="session")
def tiny_qwen3(tiny_models) -> Path:
    return tiny_models["qwen3"]


@pytest.fixture(scope="session")
def tiny_llama(tiny_models) -> Path:
    return tiny_models["llama"]


@pytest.fixture(scope="session")
def tiny_gemma2(tiny_models) -> Path:
    return tiny_models["gemma2"]


@pytest.fixture(scope="session")
def tiny_gemma3(tiny_models) -> Path:
    return tiny_models["gemma3"]


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory) -> Path:
    """The qwen3 checkpoint that served replicas load (seed 0): server, gateway, CLI, control plane."""
    return make_tiny_model(tmp_path_factory.mktemp("ckpt") / "tiny-qwen3", arch="qwen3", seed=0)


@pytest.fixture(scope="session")
def gguf_twins(tmp_path_factory) -> dict[str, tuple[Path, Path]]:
    """arch -> (safetensors directory, its F32 GGUF file). Llama's is given plain RoPE: llama.cpp
    carries Llama 3 RoPE scaling as a frequency tensor, which the engine does not read."""
    root = tmp_path_factory.mktemp("gguf-twins")
    found = {}
    for seed, arch in enumerate(GGUF_TWIN_ARCHES, start=11):
        model_dir = make_tiny_model(root / arch, arch=arch, seed=seed)
        if arch == "llama":
            config = json.loads((model_dir / "config.json").read_text())
            config["rope_parameters"] = {"rope_type": "default", "rope_theta": 10000.0}
            (model_dir / "config.json").write_text(json.dumps(config))
        found[arch] = (model_dir, write_gguf(model_dir, root / f"{arch}.gguf"))
    return found
