"""Tiny checkpoints, made once per test session (server, gateway and control-plane tests reuse
``engine.testing.tiny_model.make_tiny_model`` the same way)."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.testing.tiny_model import ARCHES, make_tiny_model

# Different seeds per arch so llama and mistral (same shapes) do not share weights.
ARCH_SEEDS = {"llama": 1, "mistral": 2, "qwen2": 3, "qwen3": 4}


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("tiny-models")
    return {arch: make_tiny_model(root / arch, arch=arch, seed=ARCH_SEEDS[arch]) for arch in ARCHES}


@pytest.fixture(scope="session")
def tiny_qwen3(tiny_models) -> Path:
    return tiny_models["qwen3"]


@pytest.fixture(scope="session")
def tiny_llama(tiny_models) -> Path:
    return tiny_models["llama"]
