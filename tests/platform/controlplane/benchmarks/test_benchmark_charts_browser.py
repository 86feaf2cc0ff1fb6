"""The uPlot charts of the benchmark pages draw in a real chromium (Playwright) against a live server,
1400 px wide without horizontal overflow (screenshots go to $CHASSIS_SCREENSHOT_DIR if set)."""

import pytest

from tests.support.browser import check_layout, chromium, log_in, make_user

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def page(monkeypatch, live_server):
    make_user("chart-viewer", "viewer")
    with chromium(monkeypatch) as browser:
        yield log_in(browser, live_server.url, "chart-viewer", timeout_ms=15_000)


def test_run_and_trend_charts_draw(page, live_server, make_deployment):
    from controlplane.benchmarks.models import BenchmarkRun, BenchmarkSchedule

    deployment = make_deployment()
    schedule = BenchmarkSchedule.objects.create(name="hourly", deployment=deployment)
    for ttft in (10.0, 11.0, 30.0):
        run = BenchmarkRun.objects.create(deployment=deployment, schedule=schedule)
        run.start(["u"])
        run.succeed(
            {"requests_ok": 3, "ttft_p50_ms": ttft, "output_tokens_per_s": 50.0},
            [[0.0, ttft, 1.0, True], [0.2, ttft + 1, 1.1, True], [0.4, ttft + 2, 1.2, True]],
        )
    page.goto(f"{live_server.url}/benchmarks/{run.pk}/")
    page.wait_for_selector("#chart-timeline[data-points='3'] canvas")
    page.wait_for_selector("#chart-distribution[data-points='3'] canvas")
    page.goto(f"{live_server.url}/benchmarks/schedules/{schedule.pk}/")
    page.wait_for_selector("#chart-ttft[data-points='3'] canvas")
    page.wait_for_selector("#chart-tps[data-points='3'] canvas")
    assert page.locator("tr[data-state='succeeded']").count() == 3


GRID = {"concurrency": [1, 2, 4], "input_tokens": [16, 64], "output_tokens": [4, 12]}


def sweep_run(deployment, scale: float, **results):
    from controlplane.benchmarks.models import BenchmarkRun

    run = BenchmarkRun.objects.create(deployment=deployment, sweep=GRID, requests=4)
    run.start(
        ["u"], {"engine_config": {"max_num_seqs": 64 if scale == 1 else 1}, "versions": {"engine": "0.1.0"}}
    )
    points = [
        {"concurrency": c, "input_tokens": i, "output_tokens": o, "ttft_p50_ms": scale * (5 + c * i / 8 + o),
         "uncached_input_tokens_per_s": 40.0 * c * i / scale / (1 + o / 8),
         "per_user_output_tokens_per_s": 300.0 / c / scale / (1 + i / 64), "output_tokens_per_s": 250.0 * c / scale + o}
        for c in GRID["concurrency"] for i in GRID["input_tokens"] for o in GRID["output_tokens"]
    ]  # fmt: skip
    run.succeed({"requests_ok": 48, "ttft_p50_ms": 10.0 * scale, "sweep_points": points, **results}, [])
    return run


def test_sweep_charts_compare_runs_with_fronts_and_the_regression_section(page, live_server, make_deployment):
    deployment = make_deployment()
    before = sweep_run(deployment, 1.0)
    judged = {
        "value": 30.0,
        "median": 10.0,
        "mad": 0.5,
        "limit": 12.2,
        "worse_when": "higher",
        "regressed": True,
    }
    regression = {
        "baseline_runs": [before.pk], "regressed_metrics": ["ttft_p50_ms"], "metrics": {"ttft_p50_ms": judged},
        "changed_conditions": [{"key": "engine_config.max_num_seqs", "before": 64, "after": 1}],
    }  # fmt: skip
    after = sweep_run(deployment, 3.0, regressed=True, baseline_ttft_p50_ms=10.0, regression=regression)
    page.goto(f"{live_server.url}/benchmarks/{after.pk}/?compare={before.pk}")
    page.wait_for_selector("#chart-prefill[data-points='12'] canvas")
    page.wait_for_selector("#chart-decode[data-points='12'] canvas")
    legend = page.locator("#chart-prefill .u-legend").inner_text()
    assert f"#{after.pk} chat Pareto front" in legend and f"#{before.pk} chat points" in legend
    assert page.locator("#changed-since-baseline tr[data-key='engine_config.max_num_seqs']").count() == 1
    assert page.locator("#judged-ttft_p50_ms").inner_text().endswith("regressed")
    check_layout(page, "run-sweep-regression")
