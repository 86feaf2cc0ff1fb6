"""scripts/gpu/batch_invariance.py on CPU: the tiny-llama shape in batch-invariant mode with every
kernel in Triton's interpreter (the kernels the mode selects on a GPU), few and short prompts, so the
GPU script's own logic (configurations, prefix-cache resets, chunk sizes, the comparison) runs in CI."""

import importlib.util
import json
from pathlib import Path

import pytest
import torch

from engine.layers.batch_invariant import batch_invariant, set_batch_invariant
from kernels import _common
from tests.support.row_invariant_dot import install_row_invariant_dot

SCRIPT = Path(__file__).resolve().parents[3] / "scripts" / "gpu" / "batch_invariance.py"


def _load_script():
    spec = importlib.util.spec_from_file_location("batch_invariance", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def restore_switches():
    kernels, invariant = _common.kernels_mode(), batch_invariant()
    yield
    _common.set_mode(kernels)
    set_batch_invariant(invariant)


@pytest.mark.slow
def test_the_script_passes_on_a_tiny_model(tmp_path, monkeypatch, restore_switches, capsys):
    if torch.cuda.is_available():
        pytest.skip("Triton on CPU tensors needs the interpreter, which is off where CUDA exists")
    install_row_invariant_dot(monkeypatch)  # the GPU's MMA rows (tests/support/row_invariant_dot.py)
    script = _load_script()
    out = tmp_path / "report.json"
    argv = ["--random-arch", "tiny-llama", "--device", "cpu", "--dtype", "bfloat16", "--kernels", "triton",
            "--prompts", "4", "--alone", "2", "--min-prompt", "5", "--max-prompt", "14", "--max-tokens", "2",
            "--chunk", "8", "--max-num-batched-tokens", "64", "--max-num-seqs", "8", "--max-model-len", "64",
            "--skip-cost", "--json", str(out)]  # fmt: skip
    assert script.main(argv) == 0, capsys.readouterr().out
    report = json.loads(out.read_text())
    assert report["passed"]
    assert set(report["invariance"]) == set(script.CONFIGS)
    assert report["invariance"]["alone"] == {**report["invariance"]["alone"], "identical": 2, "outputs": 2}
    for name in script.CONFIGS:
        if name != "alone":
            assert report["invariance"][name]["identical"] == 4, name
    printed = capsys.readouterr().out
    assert "c64: 4/4 outputs bitwise identical to b256" in printed


def test_prompts_share_prefixes_and_params_mix_greedy_and_seeded():
    script = _load_script()
    prompts = script.make_prompts(12, 8, 30, 500, seed=0)
    assert all(8 <= len(p) <= 31 for p in prompts)
    assert prompts[0][:8] == prompts[3][:8] == prompts[9][:8]  # 12 prompts: one shared prefix
    assert prompts[1][:8] != prompts[0][:8]
    many = script.make_prompts(256, 8, 30, 500, seed=0)
    assert len({tuple(p[:8]) for p in many[::3]}) == 4
    params = script.make_params(4, 5)
    assert [p.temperature for p in params] == [0.0, 0.8, 0.0, 0.8]
    assert params[1].seed is not None and params[1].top_p == 0.9 and params[3].top_k == 50
    assert all(p.logprobs == 2 for p in params)
