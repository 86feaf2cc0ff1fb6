"""Architectures by their Hugging Face name. Each architecture is one module of ``engine.models`` that
registers its config parser, the KV cache layout of its layers and its model class; the registry
finds those modules itself, so adding an architecture touches nothing else.

No torch here or in the architecture modules: the control plane parses and validates checkpoints
through this registry without it. A model class is named as ``"module:Class"`` and imported only
when a model is built; model code (torch) lives in a shared module (``SHARED_MODULES``, like the
Llama-family ``decoder``) or in a subpackage, which discovery does not import.

Adding an architecture: a module here that calls ``register(Architecture(...))`` when imported,
and its test (as ``qwen3.py`` and tests/engine/models/test_qwen3.py).
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from engine.checkpoint.model_config import ModelConfig
    from engine.kv.specs import KVCacheSpec

# Modules of engine.models that hold shared code, not an architecture (the torch ones must not be
# imported while looking architectures up).
SHARED_MODULES = frozenset({"registry", "loader", "decoder"})


@dataclass(frozen=True)
class Architecture:
    names: tuple[str, ...]  # the config.json ``architectures`` entries it serves
    # config.json -> ModelConfig; raises KeyError / TypeError / ValueError on a bad field.
    parse_config: Callable[[dict, str], ModelConfig]
    # (config, block size, KV dtype name, tensor-parallel size) -> one spec per layer, on one rank.
    kv_cache_specs: Callable[[ModelConfig, int, str, int], list[KVCacheSpec]]
    model_class: str  # "module:Class", built as Class(cfg, dtype, device, max_position, tp_group)


_REGISTERED: dict[str, Architecture] = {}
_discovered = False


def register(arch: Architecture) -> Architecture:
    for name in arch.names:
        known = _REGISTERED.get(name)
        if known is not None and known != arch:
            raise ValueError(f"architecture {name!r} is registered twice")
        _REGISTERED[name] = arch
    return arch


def get_architecture(name: str) -> Architecture | None:
    _discover()
    return _REGISTERED.get(name)


def supported_architectures() -> list[str]:
    _discover()
    return sorted(_REGISTERED)


def kv_cache_specs(cfg: ModelConfig, block_size: int, dtype: str, tp: int = 1) -> list[KVCacheSpec]:
    """The KV cache layout of every layer of ``cfg``'s model on one of ``tp`` ranks."""
    return _lookup(cfg.architecture).kv_cache_specs(cfg, block_size, dtype, tp)


def model_class(cfg: ModelConfig) -> type:
    module_name, class_name = _lookup(cfg.architecture).model_class.split(":")
    return getattr(importlib.import_module(module_name), class_name)


def _lookup(name: str) -> Architecture:
    arch = get_architecture(name)
    if arch is None:
        raise ValueError(
            f"unsupported architecture {name!r}; supported: {', '.join(supported_architectures())}"
        )
    return arch


def architecture_modules() -> list[str]:
    """The modules discovery imports: every module of engine.models but the shared ones."""
    import engine.models

    return [
        f"engine.models.{m.name}"
        for m in pkgutil.iter_modules(engine.models.__path__)
        if not m.ispkg and m.name not in SHARED_MODULES and not m.name.startswith("_")
    ]


def _discover() -> None:
    global _discovered
    if not _discovered:
        for name in architecture_modules():
            importlib.import_module(name)
        _discovered = True
