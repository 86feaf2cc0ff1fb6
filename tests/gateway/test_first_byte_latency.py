"""Streaming passes through unbuffered: the client's first byte trails the replica's by a few ms.

The upstream is a real HTTP server on loopback in this process (so its clock is the test's clock);
it records when each stream's first chunk leaves it. The same streams also go to it directly, which
gives the baseline lag of an HTTP client without the gateway in between.
"""

import statistics
import time

import httpx
from test_proxy import chat, start_gateway
from upstream_app import Upstream


def _first_chunk_lags(url: str, upstream: Upstream, streams: int) -> list[float]:
    lags = []
    with httpx.Client(timeout=10) as client:
        for _ in range(streams):
            with client.stream(
                "POST", f"{url}/v1/chat/completions", json=chat(stream=True, max_tokens=3)
            ) as r:
                assert r.status_code == 200
                arrived = None
                for line in r.iter_lines():
                    if arrived is None and line.startswith("data: "):
                        arrived = time.perf_counter()
            lags.append(arrived - upstream.first_chunk_sent_at[-1])
    return lags


def test_first_byte_reaches_the_client_within_a_few_ms_of_the_replica(serve):
    upstream = Upstream("a")
    upstream.first_delay_s = 0.05  # the "prefill": the first chunk is produced well after the request
    up = serve(upstream.app)
    _, gw = start_gateway(serve, [{"url": up.url, "id": "a"}])
    _first_chunk_lags(gw.url, upstream, 2)  # warm both paths' connections
    direct = _first_chunk_lags(up.url, upstream, 15)
    through_gateway = _first_chunk_lags(gw.url, upstream, 15)
    added_ms = (statistics.median(through_gateway) - statistics.median(direct)) * 1e3
    print(
        f"first-byte lag p50: direct {statistics.median(direct) * 1e3:.2f} ms, through the gateway {statistics.median(through_gateway) * 1e3:.2f} ms"
    )
    assert statistics.median(through_gateway) * 1e3 < 15, through_gateway
    assert added_ms < 10, (
        f"gateway adds {added_ms:.1f} ms to the first byte (direct {direct}, gateway {through_gateway})"
    )
