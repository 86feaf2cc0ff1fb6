"""The engine dashboard's cost panels compute what they say, evaluated by Prometheus's own rule
engine (promtool test rules) on series shaped like a replica's."""

from __future__ import annotations

import subprocess

import yaml

from dashboards.engine_dashboard import cost_row

GRAFANA = {"$__rate_interval": "1m", "$model_name": ".*", "$instance": ".*"}
LABELS = '{model_name="m", instance="r0", job="chassis-replicas"}'


def _series(name: str, per_minute: float, labels: str = LABELS) -> dict:
    return {"series": f"{name}{labels}", "values": f"0+{per_minute:g}x10"}


def test_spend_tokens_per_accelerator_and_cost_per_million(tmp_path, promtool):
    panels = {panel.title: panel for panel in cost_row().panels}
    rules = []
    for title, record in (("Spend per hour", "spend"), ("Tokens/s per accelerator", "per_acc"),
                          ("Cost per million tokens", "per_million")):  # fmt: skip
        for i, query in enumerate(panels[title].queries):
            expr = query.expr
            for variable, value in GRAFANA.items():
                expr = expr.replace(variable, value)
            # In thousandths, rounded: promtool compares floats exactly.
            rules.append({"record": f"{record}_{i}", "expr": f"round(({expr}) * 1000)"})
    (tmp_path / "rules.yml").write_text(yaml.safe_dump({"groups": [{"name": "cost", "rules": rules}]}))
    busy = (
        'chassis_engine_busy_seconds_total{model_name="m", instance="r0", job="chassis-replicas", work="%s"}'
    )
    # Per second: 2 accelerators at 3.6 an hour; 600 output and 1,200 prompt tokens, 300 of them
    # cached (device and tiers); busy 0.3 s prefill, 0.6 s decode, 0.1 s onloading from the host tier.
    series = [
        {"series": f"chassis_accelerators{LABELS}", "values": "2x10"},
        {"series": f"chassis_accelerator_hour_price{LABELS}", "values": "3.6x10"},
        _series("vllm:generation_tokens_total", 600 * 60),
        _series("vllm:prompt_tokens_total", 1200 * 60),
        _series("vllm:prefix_cache_hits_total", 300 * 60),
        {"series": busy % "prefill", "values": "0+18x10"},
        {"series": busy % "decode", "values": "0+36x10"},
        _series("chassis_kv_tier_onload_seconds_total", 6, LABELS[:-1] + ', tier="host"}'),
    ]
    spend_per_s = 2 * 3.6 / 3600  # 0.002
    expected = {
        "spend_0": 7.2,
        "per_acc_0": 300,  # output tokens/s per accelerator
        "per_acc_1": 600,  # input
        "per_million_0": spend_per_s * 0.3 / 900 * 1e6,  # uncached input: 900 tokens/s
        "per_million_1": spend_per_s * 0.1 / 300 * 1e6,  # cached input
        "per_million_2": spend_per_s * 0.6 / 600 * 1e6,  # output
    }
    test = {
        "rule_files": ["rules.yml"],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": series,
                "promql_expr_test": [
                    {
                        "expr": record,
                        "eval_time": "5m",
                        "exp_samples": [{"labels": f'{record}{{model_name="m"}}', "value": round(v * 1000)}],
                    }
                    for record, v in expected.items()
                ],
            }
        ],
    }
    (tmp_path / "test.yml").write_text(yaml.safe_dump(test))
    result = subprocess.run(
        [promtool, "test", "rules", "test.yml"], cwd=tmp_path, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr
