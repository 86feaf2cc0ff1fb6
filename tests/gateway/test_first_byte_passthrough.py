"""Streaming passes through unbuffered: the client gets the replica's first chunk while the replica
still holds the second (a ``ChunkGate`` decides when each chunk leaves), on both chat APIs.

This used to compare first-byte lags in milliseconds, which failed whenever the machine was busy;
how many milliseconds the gateway adds is a benchmark figure (gateway/bench), not a test.
"""

import httpx
import pytest

from tests.support.gateway import chat, start_gateway
from tests.support.upstream import ChunkGate, Upstream
from tests.support.waiting import wait_until


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/messages"])
def test_first_chunk_reaches_the_client_while_the_replica_holds_the_rest(serve, path):
    upstream = Upstream("a")
    upstream.gate = ChunkGate()
    up = serve(upstream.app)
    _, gw = start_gateway(serve, [{"url": up.url, "id": "a"}])
    upstream.gate.release()  # the gateway answers with the first chunk (it may retry until then)
    with httpx.Client(timeout=60) as client:
        with client.stream("POST", f"{gw.url}{path}", json=chat(stream=True, max_tokens=3)) as response:
            assert response.status_code == 200
            events = (line for line in response.iter_lines() if line.startswith("data: "))
            assert '"t0 "' in next(events)  # chunk 0 arrived; chunk 1 has not left the replica yet
            upstream.gate.release(2)
            assert '"t1 "' in next(events) and '"t2 "' in next(events)
            assert next(events) == "data: [DONE]"
    # The replica counts a stream complete after its [DONE] has left, which can be after the client read it.
    wait_until(lambda: upstream.completed == 1, "the replica finishing its stream")
