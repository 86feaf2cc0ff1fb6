"""Smoke test of ``chassis bench disaggregation``: a few prefill-heavy requests through mixed and
then prefill/decode replicas of the tiny model; both modes answer everything and report TTFT and
ITL p99 side by side (the figures themselves are the bench's, not a test's)."""

import argparse
import json
import math

import pytest

from gateway.bench import disaggregation

pytestmark = pytest.mark.slow


def test_both_modes_serve_every_request_and_report_ttft_and_itl(tiny_checkpoint, tmp_path, capsys):
    parser = argparse.ArgumentParser()
    disaggregation.add_arguments(parser)
    out = tmp_path / "pd.json"
    args = parser.parse_args(
        ["--requests", "6", "--rate", "20", "--prompt-words", "60", "--max-tokens", "6"]
        + ["--model", str(tiny_checkpoint), "--workdir", str(tmp_path / "work"), "--json", str(out)]
    )
    assert disaggregation.run(args) == 0
    table = capsys.readouterr().out
    assert "mixed" in table and "disaggregated" in table and "ITL p99" in table
    modes = {m["policy"]: m for m in json.loads(out.read_text())["modes"]}
    for mode in ("mixed", "disaggregated"):
        assert modes[mode]["requests"] == 6 and modes[mode]["failed"] == 0, modes[mode]["errors"]
        assert math.isfinite(modes[mode]["ttft_p99_ms"]) and math.isfinite(modes[mode]["itl_p99_ms"])


@pytest.mark.parametrize("argv", [["--prefill", "0"], ["--rate", "0"], ["--modes", "both"]])
def test_bad_arguments_are_refused(argv):
    parser = argparse.ArgumentParser()
    disaggregation.add_arguments(parser)
    with pytest.raises(SystemExit):
        parser.parse_args(argv)
