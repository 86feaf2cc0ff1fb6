"""A deployment's chart series from Prometheus' query API, for history longer than the control
plane keeps its own samples. Prometheus scrapes the replicas with a ``deployment`` label (the file_sd
targets written by ``chassis dashboards targets``); the queries aggregate as serving/series.py does."""

from __future__ import annotations

import httpx

TIMEOUT_S = 10.0


class PrometheusUnavailable(Exception):
    """Prometheus did not answer, or answered with an error: the message says which."""


def _queries(deployment: str, window: str) -> dict[str, str]:
    selector = f'{{job="chassis-replicas",deployment="{deployment}"}}'

    def rate(metric: str) -> str:
        return f"sum(rate({metric}{selector}[{window}]))"

    def ttft(q: float) -> str:
        return (
            f"1000 * histogram_quantile({q}, sum by (le) "
            f"(rate(vllm:time_to_first_token_seconds_bucket{selector}[{window}])))"
        )

    return {
        "tokens_per_s": rate("vllm:generation_tokens_total"),
        "ttft_p50_ms": ttft(0.5),
        "ttft_p90_ms": ttft(0.9),
        "prefix_cache_hit_rate": f"{rate('vllm:prefix_cache_hits_total')} / {rate('vllm:prefix_cache_queries_total')}",
    }


def _value(text: str) -> float | None:
    value = float(text)
    return (
        None if value != value or value in (float("inf"), float("-inf")) else round(value, 4)
    )  # NaN: no data


def query_series(base_url: str, deployment: str, starts: list[float], step: float) -> dict:
    """The same shape as series.deployment_series, one point per bucket start."""
    window = f"{max(int(step), 1) * 2}s"  # two steps: rate() needs two scrapes inside its window
    series: dict[str, list] = {"t": starts}
    index = {round(t): position for position, t in enumerate(starts)}
    with httpx.Client(base_url=base_url, timeout=TIMEOUT_S) as client:
        for name, query in _queries(deployment, window).items():
            params = {"query": query, "start": starts[0], "end": starts[-1], "step": step}
            try:
                response = client.get("/api/v1/query_range", params=params)
                body = response.json()
            except (httpx.HTTPError, ValueError) as exc:
                raise PrometheusUnavailable(f"Prometheus at {base_url} did not answer: {exc}") from exc
            if response.status_code != 200 or body.get("status") != "success":
                raise PrometheusUnavailable(f"Prometheus at {base_url} refused the query: {body.get('error', response.status_code)}")  # fmt: skip
            values: list[float | None] = [None] * len(starts)
            for result in body["data"]["result"][:1]:  # sum(...) leaves one series
                for at, text in result["values"]:
                    position = index.get(round(float(at)))
                    if position is not None:
                        values[position] = _value(text)
            series[name] = values
    return series
