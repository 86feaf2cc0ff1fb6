"""The chat locustfiles (single-turn stream, shared prefix, multi-turn) run headless against a REAL
``chassis serve`` replica; their TTFT and inter-token latency events land in Locust's CSV output."""

from __future__ import annotations

import httpx

from tests.loadtests.locust_run import API_KEY, MODEL, run_locust


def prefix_cache(base_url: str) -> tuple[float, float]:
    text = httpx.get(f"{base_url}/metrics", timeout=10).text
    values = {}
    for line in text.splitlines():
        for name in ("vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total"):
            if line.startswith(name + "{"):
                values[name] = float(line.rsplit(" ", 1)[1])
    return values["vllm:prefix_cache_hits_total"], values["vllm:prefix_cache_queries_total"]


def test_streaming_users_record_ttft_and_itl(replica, tmp_path):
    hits_before, _ = prefix_cache(replica.url)
    env = {
        "CHASSIS_API_KEY": API_KEY,
        "CHASSIS_MAX_TOKENS": "8",
        "CHASSIS_MIN_TOKENS": "8",  # the sampled tiny model may otherwise stop at its first token
        "CHASSIS_PREFIX_WORDS": "60",
        "CHASSIS_TURNS": "3",
    }
    run = run_locust(
        ["chat_stream.py", "shared_prefix.py", "multi_turn.py"], replica.url, tmp_path / "chat", 4, 10, env
    )
    rows, result = run["rows"], run["result"]
    assert result.returncode == 0, result.stderr[-3000:]

    for name in ("chat", "shared-prefix", "multi-turn 1"):
        post = rows[("POST", name)]
        assert int(post["Request Count"]) > 0 and int(post["Failure Count"]) == 0, post
        ttft = rows[("TTFT", name)]
        # One TTFT per finished request, plus those still streaming when the run stopped.
        assert 0 <= int(ttft["Request Count"]) - int(post["Request Count"]) <= 4, (ttft, post)
        assert 0 < float(ttft["Average Response Time"]) < 10_000
        assert int(rows[("ITL", name)]["Request Count"]) > 0
    assert ("POST", "multi-turn 2") in rows  # conversations went on past their first turn
    # The model was discovered from /v1/models (CHASSIS_MODEL unset) with the API key.
    assert int(rows[("GET", "/v1/models")]["Failure Count"]) == 0

    hits_after, queries = prefix_cache(replica.url)
    assert queries > 0 and hits_after > hits_before  # shared system prompts and histories hit the cache


def test_a_wrong_api_key_fails_the_requests(replica, tmp_path):
    env = {"CHASSIS_API_KEY": "wrong", "CHASSIS_MODEL": MODEL, "CHASSIS_MAX_TOKENS": "4"}
    # 10 s, not 2: on a loaded machine Locust's own start-up took the whole 2 s run, so no request left.
    run = run_locust(["chat_stream.py"], replica.url, tmp_path / "bad", 2, 10, env)
    post = run["rows"][("POST", "chat")]
    assert int(post["Failure Count"]) == int(post["Request Count"]) > 0
    assert ("TTFT", "chat") not in run["rows"]
    assert run["result"].returncode != 0  # Locust exits non-zero when requests failed
