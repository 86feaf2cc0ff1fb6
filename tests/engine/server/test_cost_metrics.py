"""/metrics carries what the cost panels need: accelerators held, the price the operator set and the
engine's busy time split between prefill and decode work."""

from __future__ import annotations

import pytest
from prometheus_client import generate_latest

from engine.config import EngineConfig
from engine.outputs import EngineStats
from engine.server.metrics import ServerMetrics
from tests.support.exposition import samples, value


def test_price_accelerators_and_busy_seconds_are_exported():
    stats = EngineStats(0, 0, 0.0, 8, 0, 0, 0, 0, 0, 0, busy_seconds={"prefill": 1.5, "decode": 4.0})
    metrics = ServerMetrics("tiny", lambda: stats, accelerators=2, accelerator_hour_price=3.25)
    scraped = samples(generate_latest(metrics.registry).decode())
    assert value(scraped, "chassis_accelerators", model_name="tiny") == 2
    assert value(scraped, "chassis_accelerator_hour_price", model_name="tiny") == 3.25
    assert value(scraped, "chassis_engine_busy_seconds_total", work="prefill") == 1.5
    assert value(scraped, "chassis_engine_busy_seconds_total", work="decode") == 4.0


@pytest.mark.parametrize("price", [-1.0, float("inf"), float("nan"), True, "2"])
def test_a_bad_price_is_refused_naming_the_option(price):
    with pytest.raises(ValueError, match="accelerator_hour_price"):
        EngineConfig("/m", accelerator_hour_price=price)
