"""``chassis bench speculative`` runs tiny: both modes per batch size in one run, the same greedy
tokens, and acceptance, mean accepted length and speedup in the table and the JSON."""

import json

from chassis.main import main


def test_the_bench_compares_speculation_with_none_at_each_batch_size(tiny_llama, tmp_path, capsys):
    out = tmp_path / "spec.json"
    argv = ["bench", "speculative", "--model", str(tiny_llama), "--batch-sizes", "1", "3"]
    argv += ["--max-tokens", "12", "--speculative-scheduling", "fixed", "--json", str(out)]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "accept" in printed and "mean len" in printed and "speedup" in printed
    rows = json.loads(out.read_text())
    assert [(r["batch_size"], r["mode"]) for r in rows] == [
        (1, "off"),
        (3, "off"),
        (1, "ngram"),
        (3, "ngram"),
    ]
    for row in rows[2:]:
        assert row["identical_to_off"] is True
        assert row["speedup"] > 0 and row["acceptance_rate"] is not None
        assert row["mean_accepted_length"] >= 1
    assert all(r["output_tokens"] == 12 * r["batch_size"] for r in rows)
