"""A deployment's chart series from Prometheus' query API, for history longer than the control
plane keeps its own samples. Prometheus scrapes the replicas with a ``deployment`` label (the file_sd
targets written by ``chassis dashboards targets``); the queries aggregate as serving/series.py does."""

from __future__ import annotations

import httpx

from dashboards.engine_dashboard import RATE, SELECTOR, cost_row

TIMEOUT_S = 10.0


class PrometheusUnavailable(Exception):
    """Prometheus did not answer, or answered with an error: the message says which."""


def _selector(deployment: str) -> str:
    return f'{{job="chassis-replicas",deployment="{deployment}"}}'


def _rate(metric: str, deployment: str, window: str, by: str = "") -> str:
    grouping = f" by ({by})" if by else ""
    return f"sum{grouping}(rate({metric}{_selector(deployment)}[{window}]))"


def _queries(deployment: str, window: str) -> dict[str, str]:
    """One series each."""

    def rate(metric: str) -> str:
        return _rate(metric, deployment, window)

    accepted = rate("vllm:spec_decode_num_accepted_tokens_total")

    def ttft(q: float) -> str:
        return (
            f"1000 * histogram_quantile({q}, sum by (le) "
            f"(rate(vllm:time_to_first_token_seconds_bucket{_selector(deployment)}[{window}])))"
        )

    return {
        "tokens_per_s": rate("vllm:generation_tokens_total"),
        "ttft_p50_ms": ttft(0.5),
        "ttft_p90_ms": ttft(0.9),
        "prefix_cache_hit_rate": f"{rate('vllm:prefix_cache_hits_total')} / {rate('vllm:prefix_cache_queries_total')}",
        "spec_acceptance_rate": f"{accepted} / {rate('vllm:spec_decode_num_draft_tokens_total')}",
        "spec_mean_accepted_length": f"1 + {accepted} / {rate('vllm:spec_decode_num_drafts_total')}",
    }


def _tier_queries(deployment: str, window: str) -> dict[str, str]:
    """One series per KV tier (label ``tier``), as series.TIER_SERIES."""

    def by_tier(metric: str) -> str:
        return _rate(metric, deployment, window, by="tier")

    prompt_tokens = _rate("vllm:prompt_tokens_total", deployment, window)
    return {
        "kv_tier_hit_rate": f"{by_tier('chassis_kv_tier_hit_tokens_total')} / ignoring (tier) group_left {prompt_tokens}",
        "kv_tier_onload_gb_per_s": f"{by_tier('chassis_kv_tier_onload_bytes_total')}"
        f" / {by_tier('chassis_kv_tier_onload_seconds_total')} / 1e9",
        "kv_tier_bytes_held": f"sum by (tier) (chassis_kv_tier_bytes{_selector(deployment)})",
    }


def _cost_queries(deployment: str, window: str) -> dict[str, str | dict[str, str]]:
    """The engine dashboard's Cost row (the same PromQL, defined once there), its Grafana variables
    bound to this deployment's replicas: one series each, as series.COST_SERIES."""
    queries = {panel.title: [query.expr for query in panel.queries] for panel in cost_row().panels}

    def bind(expr: str) -> str:
        bound = expr.replace(SELECTOR, _selector(deployment)[1:-1]).replace(RATE, f"[{window}]")
        if "$" in bound:  # the dashboard grew a variable this does not bind
            raise ValueError(f"a Grafana variable left in {bound}")
        return bound

    spend = queries["Spend per hour"]
    per_accelerator = queries["Tokens/s per accelerator"]
    per_million = queries["Cost per million tokens"]
    return {
        "spend_per_hour": bind(spend[0]),
        "cost_per_million": {
            "input_uncached": bind(per_million[0]),
            "input_cached": bind(per_million[1]),
            "output": bind(per_million[2]),
        },
        "tokens_per_s_per_accelerator": {
            "output": bind(per_accelerator[0]),
            "input": bind(per_accelerator[1]),
        },
    }


def _value(text: str) -> float | None:
    value = float(text)
    return (
        None if value != value or value in (float("inf"), float("-inf")) else round(value, 4)
    )  # NaN: no data


def query_series(base_url: str, deployment: str, starts: list[float], step: float) -> dict:
    """The same shape as series.deployment_series, one point per bucket start."""
    window = f"{max(int(step), 1) * 2}s"  # two steps: rate() needs two scrapes inside its window
    series: dict[str, list | dict] = {"t": starts}
    with httpx.Client(base_url=base_url, timeout=TIMEOUT_S) as client:
        for name, query in _queries(deployment, window).items():
            results = _query_range(client, query, starts, step)  # sum(...) leaves one series
            series[name] = _values(results[0], starts) if results else [None] * len(starts)
        for name, query in _tier_queries(deployment, window).items():
            results = _query_range(client, query, starts, step)
            by_tier = {result["metric"].get("tier", ""): _values(result, starts) for result in results}
            series[name] = dict(sorted(by_tier.items()))
        for name, query in _cost_queries(deployment, window).items():
            if isinstance(query, dict):
                series[name] = {line: _one_series(client, expr, starts, step) for line, expr in query.items()}
            else:
                series[name] = _one_series(client, query, starts, step)
    _unpriced_is_none(series)
    return series


def _one_series(client: httpx.Client, query: str, starts: list[float], step: float) -> list[float | None]:
    """A query that leaves one series (a deployment serves one model); None where it has no value."""
    results = _query_range(client, query, starts, step)
    return _values(results[0], starts) if results else [None] * len(starts)


def _unpriced_is_none(series: dict) -> None:
    """Without a price (accelerator_hour_price 0) the spend and costs are unknown, not zero."""
    for position, spend in enumerate(series["spend_per_hour"]):
        if not spend:
            series["spend_per_hour"][position] = None
            for values in series["cost_per_million"].values():
                values[position] = None


def _query_range(client: httpx.Client, query: str, starts: list[float], step: float) -> list[dict]:
    params = {"query": query, "start": starts[0], "end": starts[-1], "step": step}
    try:
        response = client.get("/api/v1/query_range", params=params)
        body = response.json()
    except (httpx.HTTPError, ValueError) as exc:
        raise PrometheusUnavailable(f"Prometheus at {client.base_url} did not answer: {exc}") from exc
    if response.status_code != 200 or body.get("status") != "success":
        raise PrometheusUnavailable(f"Prometheus at {client.base_url} refused the query: {body.get('error', response.status_code)}")  # fmt: skip
    return body["data"]["result"]


def _values(result: dict, starts: list[float]) -> list[float | None]:
    """A result's values at the bucket starts; None where it has none."""
    index = {round(t): position for position, t in enumerate(starts)}
    values: list[float | None] = [None] * len(starts)
    for at, text in result["values"]:
        position = index.get(round(float(at)))
        if position is not None:
            values[position] = _value(text)
    return values
