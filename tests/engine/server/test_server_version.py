"""GET /version: the versions and resolved engine options the control plane records per benchmark run."""

from __future__ import annotations

import httpx

from engine.server.routes_version import cuda_driver, resolved_dtype


def test_version_reports_software_and_the_resolved_engine_config(replica):
    response = httpx.get(replica.base_url + "/version")  # no API key: read-only, like /health
    assert response.status_code == 200
    body = response.json()
    assert body["engine"] and body["python"].count(".") == 2 and body["code_revision"]
    assert body["torch"] and "triton" in body and "cuda_driver" in body
    assert body["dtype"] == "float32" and body["replica_id"] == "replica-test"
    config = body["engine_config"]
    assert config["num_gpu_blocks"] == 512 and config["device"] == "cpu" and config["max_num_seqs"] > 0
    assert isinstance(config["model_dir"], str)


def test_dtype_auto_is_the_checkpoints(tmp_path):
    (tmp_path / "config.json").write_text('{"torch_dtype": "bfloat16"}')
    assert resolved_dtype({"dtype": "auto"}, str(tmp_path)) == "bfloat16"
    assert resolved_dtype({"dtype": "float16"}, str(tmp_path)) == "float16"
    assert resolved_dtype({"dtype": "auto"}, str(tmp_path / "missing")) is None


def test_cuda_driver_from_the_kernel_module_file(tmp_path):
    proc = tmp_path / "version"
    proc.write_text(
        "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 22:23:56 UTC 2024\n"
    )
    assert cuda_driver(proc) == "550.54.15"
    assert cuda_driver(tmp_path / "absent") is None
