"""The serve workload against a real ``chassis serve`` subprocess (CPU, tiny random Llama)."""

from __future__ import annotations

import json

import psutil

from engine.bench import engine_bench
from engine.bench.serve_workload import ServeOptions, ServerProcess


def _child_pids() -> set[int]:
    return {p.pid for p in psutil.Process().children(recursive=True)}


def test_serve_workload_through_the_cli(tmp_path, capsys):
    out = tmp_path / "bench.json"
    before = _child_pids()
    code = engine_bench.main(
        [
            "--random-arch", "tiny-llama", "--device", "cpu", "--dtype", "float32",
            "--workload", "serve", "--serve-clients", "4", "--serve-requests", "8",
            "--serve-length-scale", "0.03", "--json", str(out),
        ]
    )  # fmt: skip
    assert code == 0
    figures = json.loads(out.read_text())["figures"]
    # lengths: prompts in [4, 31], outputs in [4, 15] tokens
    assert figures["engine_serve_requests"] == 8
    assert figures["engine_serve_clients"] == 4
    assert 8 * 4 <= figures["engine_serve_output_tokens"] <= 8 * 15
    assert 0 < figures["engine_serve_ttft_p50_ms"] <= figures["engine_serve_ttft_p99_ms"]
    assert 0 < figures["engine_serve_itl_p50_ms"] <= figures["engine_serve_itl_p99_ms"]
    seconds = figures["engine_serve_seconds"]
    assert figures["engine_serve_ttft_p99_ms"] < seconds * 1e3
    assert figures["engine_serve_output_tokens_per_s"] == figures["engine_serve_output_tokens"] / seconds
    # Sampled from /metrics every 20 ms: a run shorter than that may catch no running request at all.
    sampled = figures.get("engine_serve_mean_running_requests")
    assert sampled is None or 0 < sampled <= 4
    # the in-process reference: the same 8 requests, 4 in flight, every engine step timed
    assert 0 < figures["engine_serve_reference_step_p50_ms"] <= figures["engine_serve_reference_step_p99_ms"]
    assert figures["engine_serve_reference_steps"] >= 15  # the longest request alone takes that many
    assert 0 < figures["engine_serve_reference_mean_running_requests"] <= 4
    assert figures["serve_itl_p50_over_engine_step_p50"] == (
        figures["engine_serve_itl_p50_ms"] / figures["engine_serve_reference_step_p50_ms"]
    )
    assert "serve: starting chassis serve" in capsys.readouterr().out
    assert _child_pids() == before  # the server process is gone


def test_bad_serve_options_are_refused_before_anything_starts(capsys):
    code = engine_bench.main(
        ["--random-arch", "tiny-llama", "--device", "cpu", "--workload", "serve", "--serve-clients", "0"]
    )
    assert code == 2
    assert "--serve-clients" in capsys.readouterr().out


def test_a_server_that_cannot_start_reports_its_log(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    server = ServerProcess(tmp_path, ServeOptions(device="cpu", dtype="float32"), tmp_path / "log")
    try:
        with server:
            raise AssertionError("a config-less checkpoint must not serve")
    except RuntimeError as exc:
        assert "chassis serve exited" in str(exc)
    assert server.process.poll() is not None
