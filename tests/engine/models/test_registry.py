"""The architecture registry: one module per architecture, found without a list to edit, and
checkpoint parsing that never imports torch (the control plane validates checkpoints through it)."""

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import engine
from engine.checkpoint import CheckpointError, load_model_config, supported_architectures
from engine.models import registry
from engine.models.decoder import CausalLM
from engine.models.registry import Architecture

REPO_ROOT = Path(engine.__file__).resolve().parents[1]


def test_the_llama_family_and_its_mixture_of_experts_kin_are_registered():
    assert {
        "Gemma2ForCausalLM",
        "Gemma3ForCausalLM",
        "LlamaForCausalLM",
        "MistralForCausalLM",
        "MixtralForCausalLM",
        "Qwen2ForCausalLM",
        "Qwen3ForCausalLM",
        "Qwen3MoeForCausalLM",
    } <= set(supported_architectures())


def test_every_architecture_module_registers_what_it_declares():
    modules = registry.architecture_modules()
    assert {"engine.models.llama", "engine.models.qwen3"} <= set(modules)
    assert "engine.models.decoder" not in modules and "engine.models.loader" not in modules
    for name in modules:
        module = importlib.import_module(name)
        declared = [v for v in vars(module).values() if isinstance(v, Architecture)]
        own = [a for a in declared if a.parse_config.__module__ == name]
        assert own, f"{name} registers no architecture"
        for arch in own:
            for hf_name in arch.names:
                assert registry.get_architecture(hf_name) is arch


def test_the_llama_family_builds_the_shared_decoder(tiny_models):
    for path in tiny_models.values():
        assert registry.model_class(load_model_config(path)) is CausalLM


def test_a_name_registered_twice_is_refused():
    llama = registry.get_architecture("LlamaForCausalLM")
    assert registry.register(llama) is llama  # re-registering the same record is harmless
    other = Architecture(("LlamaForCausalLM",), llama.parse_config, llama.kv_cache_specs, "x:Y")
    with pytest.raises(ValueError, match="registered twice"):
        registry.register(other)


def test_an_unknown_architecture_names_every_supported_one(tiny_qwen3, tmp_path):
    cfg = json.loads((tiny_qwen3 / "config.json").read_text())
    cfg["architectures"] = ["GPTNeoXForCausalLM"]
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError) as info:
        load_model_config(tmp_path)
    assert "unsupported architecture 'GPTNeoXForCausalLM'" in str(info.value)
    assert all(name in str(info.value) for name in supported_architectures())


def test_checkpoint_inspection_and_the_registry_never_import_torch(tiny_models):
    script = (
        "import sys\n"
        "from engine.checkpoint import load_model_config, supported_architectures\n"
        "from engine.checkpoint.inspect import inspect_checkpoint\n"
        "from engine.models.registry import kv_cache_specs\n"
        "for path in sys.argv[1:]:\n"
        "    cfg = load_model_config(path)\n"
        "    kv_cache_specs(cfg, 16, cfg.dtype)\n"
        "    inspect_checkpoint(path)\n"
        "assert {'MixtralForCausalLM', 'Qwen3MoeForCausalLM', 'DeepseekV2ForCausalLM', 'DeepseekV3ForCausalLM'} < set(supported_architectures())\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'transformers'))\n"
        "print(loaded)\n"
    )
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    done = subprocess.run(
        [sys.executable, "-c", script, *map(str, tiny_models.values())],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO_ROOT,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
