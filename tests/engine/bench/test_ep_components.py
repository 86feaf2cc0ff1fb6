"""Issue 23's component measurement (engine/bench/ep_components.py) end to end on the CPU with the
tiny shape: every table present, complete and positive; the scaling model reads what it wrote."""

import json

import pytest

from chassis.main import main as chassis_main
from engine.bench import ep_scaling
from engine.bench.ep_components import main

TABLES = {
    "mla_attention",
    "attention_projections",
    "layer_other",
    "shared_expert",
    "dense_mlp",
    "lm_head",
    "routed_experts",
    "dispatch_combine",
}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> dict:
    path = tmp_path_factory.mktemp("ep") / "components.json"
    assert main(["--tiny", "--json", str(path)]) == 0
    return json.loads(path.read_text())


def test_tiny_run_writes_every_table_complete_and_positive(tiny):
    assert tiny["device"] == "cpu" and tiny["torch"] and tiny["date"]
    assert tiny["shape"]["name"] == "tiny" and tiny["context"] == 64
    assert set(tiny["tables"]) == TABLES
    for name in TABLES - {"routed_experts", "dispatch_combine"}:
        rows = tiny["tables"][name]
        assert [r["batch"] for r in rows] == [2, 4], name
        assert all(r["ms"] > 0 for r in rows), name
    routed = tiny["tables"]["routed_experts"]
    top_k = tiny["shape"]["top_k"]
    for ep, experts in ((2, 8), (4, 4)):
        rows = [r for r in routed if r["ep"] == ep]
        assert [r["pairs"] for r in rows] == [2 * top_k, 4 * top_k, 8 * top_k]
        assert all(r["local_experts"] == experts and r["ms"] > 0 for r in rows)
    comm = tiny["tables"]["dispatch_combine"]
    assert len(comm) == 4 and all(r["per_step"] > 0 for r in comm)
    # Within one 8-GPU node nothing crosses RDMA.
    assert all(r["dispatch_rdma"] == 0 == r["combine_rdma"] for r in comm)


def test_scaling_model_projects_from_the_tiny_run(tiny, tmp_path, capsys):
    path = tmp_path / "components.json"
    path.write_text(json.dumps(tiny))
    args = ["--components", str(path), "--ep", "2", "4", "--gpus-per-node", "2", "--gpu-memory-gb", "1"]
    assert ep_scaling.main([*args, "--reserve-gb", "0"]) == 0
    printed = capsys.readouterr().out
    assert "| 2 | 1 | 8 |" in printed and "| 4 | 2 | 4 |" in printed


def test_help_of_both_commands_through_chassis_bench(capsys):
    for command in ("ep-components", "ep-scaling"):
        with pytest.raises(SystemExit) as exit_info:
            chassis_main(["bench", command, "--help"])
        assert exit_info.value.code == 0
    assert "--components" in capsys.readouterr().out
