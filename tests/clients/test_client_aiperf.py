"""aiperf (from PyPI, in .venv-aiperf) profiles the gateway in front of the replica with a few
streamed chat requests, headless; its JSON export must show no failed request, the requested output
length (as the server counted it) and a time to first token no lower than the engine's own.

Through the gateway only: it proxies each request to the replica and streams the replica's answer
back, and the replica's own metrics must count every request, so this run exercises the replica's
API too; a second run straight at the replica would prove nothing more."""

from __future__ import annotations

import json

from tests.support.client_tools import engine_ttft, run_tool, tool
from tests.support.replicas import API_KEY, MODEL

REQUESTS, PROMPT_TOKENS, OUTPUT_TOKENS = 4, 128, 16


def test_aiperf_profile(client_gateway, client_replica, tiny_checkpoint, tmp_path):
    before = engine_ttft(client_replica)
    # No HF_HUB_OFFLINE here: aiperf 0.13.0 then looks a local tokenizer path up as a hub repo id and
    # fails; a local path is never looked up online without it.
    run_tool(
        [
            tool("aiperf"), "profile", "--model", MODEL, "--url", client_gateway, "--api-key", API_KEY,
            "--endpoint-type", "chat", "--streaming", "--tokenizer", tiny_checkpoint,
            "--synthetic-input-tokens-mean", PROMPT_TOKENS, "--synthetic-input-tokens-stddev", 0,
            "--output-tokens-mean", OUTPUT_TOKENS, "--output-tokens-stddev", 0,
            "--extra-inputs", "ignore_eos:true", "--use-server-token-count",
            "--request-count", REQUESTS, "--concurrency", 1,
            "--output-artifact-dir", tmp_path / "out", "--ui-type", "none",
        ],
        tmp_path,
    )  # fmt: skip
    after = engine_ttft(client_replica)

    report = json.loads((tmp_path / "out" / "profile_export_aiperf.json").read_text())
    assert report["is_complete"] and not report["was_cancelled"] and report["error_summary"] == []
    assert report["completed_request_count"]["avg"] == REQUESTS
    assert report["request_error_rate"]["avg"] == 0
    lengths = report["output_sequence_length"]
    assert lengths["count"] == REQUESTS and lengths["min"] == lengths["max"] == OUTPUT_TOKENS

    # aiperf's TTFT (send to first streamed token) of each request contains the engine's (arrival to
    # first token) for it; a first chunk sent before prefill would not.
    engine_sum, engine_count = after[0] - before[0], after[1] - before[1]
    assert engine_count == REQUESTS
    ttft = report["time_to_first_token"]
    assert ttft["count"] == REQUESTS and ttft["avg"] * REQUESTS / 1000 >= engine_sum > 0
