"""``chassis bench structured`` runs tiny on CPU: the report has every figure and goal, and the
constrained requests' complete documents are valid JSON for their schemas (speed is not asserted)."""

import dataclasses
import json

from chassis.main import main
from engine.bench.structured_overhead import Report, paired_added_ms


def test_the_bench_reports_every_figure_and_valid_documents(tiny_llama, tmp_path, capsys):
    out = tmp_path / "structured.json"
    argv = ["bench", "structured", "--random-arch", "tiny-llama", "--tokenizer", str(tiny_llama)]
    argv += ["--batch-size", "2", "--steps", "16", "--warmup-steps", "0", "--requests", "1"]
    argv += ["--prompt-len", "8", "--json", str(out)]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "overhead" in printed and "new schema" in printed and "cached schema" in printed
    report = json.loads(out.read_text())
    assert set(report) == {f.name for f in dataclasses.fields(Report)}
    assert set(report["goals"]) == {
        "step_overhead_ratio",
        "ttft_added_ms_new_schema",
        "ttft_added_ms_cache_hit",
    }
    assert report["constrained_rows_per_step"] == 2
    assert report["step_ms_unconstrained"] > 0 and report["step_ms_structured"] > 0
    assert all(report[f"ttft_p50_ms_{kind}"] > 0 for kind in ("unconstrained", "new_schema", "cache_hit"))
    assert report["mask_fill_host_ms_per_step"] > 0
    assert report["admission_p50_ms_unconstrained"] > 0 and report["admission_p50_ms_cache_hit"] > 0
    assert report["ttft_grammar_host_ms_per_call"] > 0
    assert report["documents_complete"] >= 1
    assert report["documents_valid"] == report["documents_complete"]


def test_what_a_schema_adds_is_the_median_of_each_rounds_difference():
    ttft = {"unconstrained": [10.0, 20.0, 30.0], "cache_hit": [10.5, 20.2, 31.0]}
    # The medians' difference would be 0.2; the rounds' differences are 0.5, 0.2 and 1.0.
    assert round(paired_added_ms(ttft, "cache_hit"), 6) == 0.5


def test_a_bad_argument_is_a_one_line_error(tiny_llama, capsys):
    argv = ["bench", "structured", "--random-arch", "tiny-llama", "--tokenizer", str(tiny_llama)]
    assert main(argv + ["--requests", "0"]) == 2
    assert "--requests must be >= 1" in capsys.readouterr().err
