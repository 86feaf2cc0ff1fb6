"""scripts/gpu/tune_invariant_matmul.py on CPU: the tiny-llama products in Triton's interpreter at two
row buckets and two candidates, timed by the wall clock, so the GPU script's own logic (products of a
config, candidates, the bitwise check, the choice, the table it writes) runs in CI."""

import importlib.util
import json
from pathlib import Path

import pytest
import torch

from engine.bench.random_arch import hf_config
from kernels import _common
from kernels.invariant_matmul_configs import MatmulConfig, MatmulTable, reference_config
from tests.support.row_invariant_dot import install_row_invariant_dot

SCRIPT = Path(__file__).resolve().parents[3] / "scripts" / "gpu" / "tune_invariant_matmul.py"


def _load_script():
    spec = importlib.util.spec_from_file_location("tune_invariant_matmul", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_products_of_a_llama_config():
    script = _load_script()
    assert script.products(hf_config("llama-3.1-8b")) == {
        "qkv": (6144, 4096),
        "o": (4096, 4096),
        "gate_up": (28672, 4096),
        "down": (4096, 14336),
        "lm_head": (128256, 4096),
    }
    assert script.products(hf_config("tiny-llama")) == {
        "qkv": (256, 128),
        "o": (128, 128),
        "gate_up": (512, 128),
        "down": (128, 256),
        "lm_head": (2048, 128),
    }


def test_candidates_start_with_the_reference_and_drop_narrow_rows_for_prefills():
    script = _load_script()
    few = script.candidates(list(script.CANDIDATES), 4096, 4096, 8)
    many = script.candidates(list(script.CANDIDATES), 4096, 4096, 1024)
    assert few[0] == many[0] == reference_config(4096, 4096)
    assert len(set(few)) == len(few) and MatmulConfig(16, 16, 256, 4, 4) in few
    assert all(c.block_m > 32 for c in many) and len(many) < len(few)


@pytest.mark.slow
def test_the_script_writes_a_table_on_cpu(tmp_path, monkeypatch, capsys):
    if torch.cuda.is_available():
        pytest.skip("Triton on CPU tensors needs the interpreter, which is off where CUDA exists")
    install_row_invariant_dot(monkeypatch)  # the GPU's MMA rows (tests/support/row_invariant_dot.py)
    table, raw = tmp_path / "table.json", tmp_path / "raw.json"
    argv = ["--random-arch", "tiny-llama", "--device", "cpu", "--buckets", "1", "4",
            "--candidates", "16x16x128/4/2", "16x64x128/4/3", "--launches", "1", "--replays", "1",
            "--write-table", str(table), "--json", str(raw)]  # fmt: skip
    assert _load_script().main(argv) == 0
    assert _common.kernels_mode() == "auto"  # the script gives the process its mode back
    results = json.loads(raw.read_text())
    assert [(r["product"], r["rows"]) for r in results] == [
        (name, rows) for name in ("qkv", "o", "gate_up", "down", "lm_head") for rows in (1, 4)
    ]
    for r in results:
        assert r["candidates"][r["reference"]]["same"] and r["best"] in r["candidates"]
        assert r["best_us"] == min(v["us"] for v in r["candidates"].values() if "us" in v)
        assert r["cublas_us"] > 0
    saved = MatmulTable.load(table)
    assert saved.device == "cpu"
    assert saved.entries == {
        ("bfloat16", r["n"], r["k"], r["rows"]): MatmulConfig.parse(r["best"])
        for r in results
        if r["best"] != r["reference"]
    }
    printed = capsys.readouterr().out
    assert "lm_head    2048x128    rows     4" in printed and "wrote" in printed
