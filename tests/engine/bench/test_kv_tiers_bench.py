"""``chassis bench kv-tiers`` runs tiny on the CPU: both ceilings measured, the prompt recomputed
and then served from the host tier and from the disk tier (their hit counters say so), and the
goals judged in the table and the JSON. Speed is not checked here."""

import json

from chassis.main import main


def test_the_bench_serves_the_prompt_from_each_tier_and_judges_the_goals(tmp_path, capsys):
    out = tmp_path / "tiers.json"
    argv = ["bench", "kv-tiers", "--random-arch", "tiny-llama", "--dtype", "float32"]
    argv += ["--prompt-tokens", "128", "--copy-mib", "4", "--disk-read-mib", "2", "--no-warmup"]
    argv += ["--kv-disk-cache-dir", str(tmp_path / "disk"), "--json", str(out)]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "host_speedup_vs_recompute" in printed and "goal" in printed
    report = json.loads(out.read_text())
    assert report["h2d_gb_per_s"] > 0 and report["disk_read_gb_per_s"] > 0
    assert report["disk_read_method"]
    cases = {c["name"]: c for c in report["cases"]}
    assert list(cases) == ["recompute", "host", "disk"]
    assert cases["recompute"]["cached_tokens"] == 0
    assert sum(cases["recompute"]["tier_hit_tokens"].values()) == 0
    for tier in ("host", "disk"):
        case = cases[tier]
        assert case["cached_tokens"] == 112  # every full block but the last: its last token is computed
        assert case["tier_hit_tokens"] == {"host": 0, "disk": 0} | {tier: 112}
        assert case["onload_bytes"] == 112 * report["kv_bytes_per_token"]
        assert case["onload_s"] > 0 and case["onload_fraction"] > 0 and case["speedup_vs_recompute"] > 0
    assert set(report["goals"]) == {
        "host_onload_vs_host_to_device",
        "disk_onload_vs_disk_read",
        "host_speedup_vs_recompute",
    }
    assert all(set(g) == {"value", "goal", "passed"} for g in report["goals"].values())
