"""Smoke test of ``chassis bench kv-trace``: a small trace through a cache_aware gateway to two
tiny-model replicas with quarter-size device pools and host, disk and shared tiers, restarted
between the halves. One request at a time, so trace order is serving order and no request can be
served more than the offline count allows."""

import argparse
import json

import pytest

from engine.tokenizer import Tokenizer
from gateway.bench import kv_trace

pytestmark = pytest.mark.slow


def test_the_tiers_serve_the_second_half_after_a_restart_and_the_accounting_adds_up(
    tiny_checkpoint, tmp_path, capsys
):
    parser = argparse.ArgumentParser()
    kv_trace.add_arguments(parser)
    out = tmp_path / "trace.json"
    args = parser.parse_args(
        ["--requests", "80", "--replicas", "2", "--concurrency", "1", "--max-tokens", "1"]
        + ["--document-words", "40", "--system-words", "20", "--engine-in-thread"]
        + ["--model", str(tiny_checkpoint), "--workdir", str(tmp_path / "work"), "--json", str(out)]
    )
    assert kv_trace.run(args, Tokenizer) == 0
    assert "goal >= 96%" in capsys.readouterr().out
    report = json.loads(out.read_text())
    pool = report["device_pool_tokens_per_replica"]
    assert 0 < pool <= report["distinct_prefix_tokens"] / 4
    first, second = report["phases"]
    assert first["requests"] + second["requests"] == 80
    for phase in (first, second):
        assert phase["failed"] == 0, phase["errors"]
        assert 0 < phase["cacheable_tokens"] < phase["prompt_tokens"]
        assert phase["served_over_cacheable_requests"] == 0
        assert phase["served_tokens"] == phase["served_within_cacheable"] <= phase["cacheable_tokens"]
        assert 0 <= phase["device_tokens"] == phase["served_tokens"] - sum(phase["tier_hit_tokens"].values())
        assert set(phase["tier_hit_tokens"]) == {"host", "disk", "shared"}
        assert all(n % report["block_size"] == 0 for n in phase["tier_hit_tokens"].values())
    # The restart emptied every device pool and host tier: what the second half found cached from
    # before came from the files the shut-down replicas wrote (disk, shared).
    assert report["restart"] and second["tier_hit_tokens"]["host"] < second["served_tokens"]
    assert second["tier_hit_tokens"]["disk"] + second["tier_hit_tokens"]["shared"] > 0
    files = report["kv_files_after_restart"]
    assert set(files) == {"disk-kv-r0", "disk-kv-r1", "shared-kv"} and files["shared-kv"] > 0


@pytest.mark.parametrize("argv", [["--requests", "1"], ["--replicas", "0"], ["--concurrency", "0"]])
def test_bad_arguments_are_refused(argv):
    parser = argparse.ArgumentParser()
    kv_trace.add_arguments(parser)
    with pytest.raises(SystemExit):
        parser.parse_args(argv)


def test_a_run_split_in_two_phases_restarts_the_replicas_between_them(tiny_checkpoint, tmp_path, capsys):
    parser = argparse.ArgumentParser()
    kv_trace.add_arguments(parser)
    common = ["--requests", "40", "--replicas", "2", "--concurrency", "1", "--max-tokens", "1"]
    common += ["--num-gpu-blocks", "64", "--document-words", "40", "--system-words", "20"]
    common += ["--engine-in-thread", "--model", str(tiny_checkpoint), "--workdir", str(tmp_path / "work")]
    first_out, second_out = tmp_path / "first.json", tmp_path / "second.json"

    def phase(name: str, out) -> int:
        return kv_trace.run(parser.parse_args(common + ["--phase", name, "--json", str(out)]), Tokenizer)

    assert phase("first", first_out) == 0
    first = json.loads(first_out.read_text())
    assert [p["phase"] for p in first["phases"]] == ["first half"]
    assert phase("second", second_out) == 0
    report = json.loads(second_out.read_text())
    assert report["phases"][0] == first["phases"][0]
    second = report["phases"][1]
    assert first["phases"][0]["requests"] + second["requests"] == 40 and second["failed"] == 0
    assert report["kv_files_after_restart"]["shared-kv"] > 0
    assert second["tier_hit_tokens"]["disk"] + second["tier_hit_tokens"]["shared"] > 0
    assert "second half" in capsys.readouterr().out


def test_the_second_phase_needs_a_finished_first_one(tiny_checkpoint, tmp_path):
    parser = argparse.ArgumentParser()
    kv_trace.add_arguments(parser)
    args = parser.parse_args(
        ["--phase", "second", "--model", str(tiny_checkpoint), "--workdir", str(tmp_path)]
    )
    with pytest.raises(SystemExit, match="--phase second needs"):
        kv_trace.run(args, Tokenizer)
