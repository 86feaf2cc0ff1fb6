"""The gateway's proxy against small real upstream apps on loopback (see tests/support/upstream.py)."""

import asyncio
import threading

import httpx
import openai
import pytest

from tests.support.gateway import chat, start_gateway
from tests.support.ports import free_port
from tests.support.upstream import ChunkGate, Upstream, client_error_body
from tests.support.waiting import async_wait_until, wait_until


def test_openai_sdk_streams_chunk_by_chunk_through_the_gateway(serve):
    upstream = Upstream("a")
    upstream.gate = ChunkGate()
    up = serve(upstream.app)
    _, gw = start_gateway(serve, [{"url": up.url, "id": "a"}])
    client = openai.OpenAI(base_url=f"{gw.url}/v1", api_key="unused", timeout=60)
    upstream.gate.release()  # the gateway answers with the first chunk (it may retry until then)
    stream = client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "hi"}], max_tokens=5, stream=True
    )
    text = ""
    for i in range(5):
        text += next(stream).choices[0].delta.content or ""
        assert text.endswith(f"t{i} ")  # chunk i reached the SDK while chunk i + 1 was held upstream
        upstream.gate.release()
    assert list(stream) == [] and text == "t0 t1 t2 t3 t4 "


def test_connect_errors_are_retried_and_the_dead_replica_is_ejected(serve):
    upstream = Upstream("live")
    up = serve(upstream.app)
    doomed = serve(Upstream("dead").app)
    gateway, gw = start_gateway(
        serve, [{"url": doomed.url, "id": "dead"}, {"url": up.url, "id": "live"}], health_interval_s=60
    )
    assert gateway.pools["m"].replicas["dead"].routable  # passed its first health check
    doomed.stop()  # dies between health checks: only failing requests can tell
    for _ in range(6):
        response = httpx.post(f"{gw.url}/v1/chat/completions", json=chat())
        assert response.status_code == 200, response.text
        assert response.headers["x-chassis-replica"] == "live"
    dead_replica = gateway.pools["m"].replicas["dead"]
    assert dead_replica.breaker.is_open
    metrics = httpx.get(f"{gw.url}/metrics").text
    assert 'chassis_gateway_retries_total{model="m"}' in metrics
    assert 'chassis_gateway_upstream_errors_total{kind="connect",replica="dead"}' in metrics


def test_draining_replica_503_is_retried_and_gets_nothing_new(serve):
    draining, live = Upstream("d"), Upstream("l")
    up_d, up_l = serve(draining.app), serve(live.app)
    gateway, gw = start_gateway(
        serve, [{"url": up_d.url, "id": "d"}, {"url": up_l.url, "id": "l"}], health_interval_s=60
    )
    draining.mode = "draining"  # starts draining between two health checks
    for _ in range(4):
        response = httpx.post(f"{gw.url}/v1/chat/completions", json=chat())
        assert response.status_code == 200 and response.headers["x-chassis-replica"] == "l"
    assert len(draining.received) == 1  # the first 503 marks it draining; nothing after that
    assert gateway.pools["m"].replicas["d"].draining
    assert 'kind="draining"' in httpx.get(f"{gw.url}/metrics").text
    assert not gateway.pools["m"].replicas["d"].breaker.is_open  # draining is not a failure


def test_5xx_on_every_replica_gives_one_clear_503(serve):
    bad = [Upstream(f"b{i}") for i in range(3)]
    for upstream in bad:
        upstream.mode = "status_500"
    urls = [{"url": serve(u.app).url, "id": u.replica_id} for u in bad]
    _, gw = start_gateway(serve, urls, health_interval_s=60)
    response = httpx.post(f"{gw.url}/v1/chat/completions", json=chat())
    assert response.status_code == 503
    assert "status_5xx" in response.json()["error"]["message"]
    assert sum(len(u.received) for u in bad) == 2  # the first try and one retry, no more


def test_a_started_stream_is_never_retried(serve):
    broken, spare = Upstream("broken"), Upstream("spare")
    broken.mode = "break_after_first"
    up_b, up_s = serve(broken.app), serve(spare.app)
    _, gw = start_gateway(
        serve, [{"url": up_b.url, "id": "broken"}, {"url": up_s.url, "id": "spare"}], health_interval_s=60
    )
    with pytest.raises(httpx.HTTPError):
        with httpx.stream(
            "POST", f"{gw.url}/v1/chat/completions", json=chat(stream=True, max_tokens=5)
        ) as response:
            assert response.headers["x-chassis-replica"] == "broken"
            for _ in response.iter_raw():
                pass
    assert spare.received == []


def test_client_disconnect_aborts_the_upstream_request(serve):
    upstream = Upstream("a")
    upstream.gate = ChunkGate()
    upstream.gate.release()  # the first chunk leaves; the stream is held before the second
    up = serve(upstream.app)
    gateway, gw = start_gateway(serve, [{"url": up.url, "id": "a"}], health_interval_s=60)
    with httpx.stream(
        "POST", f"{gw.url}/v1/chat/completions", json=chat(stream=True, max_tokens=100)
    ) as response:
        next(response.iter_raw())
    replica = gateway.pools["m"].replicas["a"]
    wait_until(lambda: upstream.aborted == 1 and replica.in_flight == 0, "the upstream stream's abort")
    assert upstream.completed == 0


def test_client_disconnect_before_the_first_byte_aborts_too(serve):
    upstream = Upstream("a")
    upstream.gate = ChunkGate()  # no chunk leaves until the client is gone
    up = serve(upstream.app)
    gateway, gw = start_gateway(serve, [{"url": up.url, "id": "a"}], health_interval_s=60)

    async def give_up_while_the_upstream_holds_the_first_chunk():
        async with httpx.AsyncClient(timeout=60) as client:
            request = asyncio.ensure_future(
                client.post(f"{gw.url}/v1/chat/completions", json=chat(stream=True))
            )
            await async_wait_until(lambda: upstream.gate.waiting == 1, "the upstream to hold the stream")
            request.cancel()
            with pytest.raises(asyncio.CancelledError):
                await request

    asyncio.run(give_up_while_the_upstream_holds_the_first_chunk())
    replica = gateway.pools["m"].replicas["a"]
    wait_until(lambda: upstream.aborted == 1 and replica.in_flight == 0, "the upstream stream's abort")
    assert upstream.completed == 0


def test_bad_requests_get_api_shaped_errors(serve):
    up = serve(Upstream("a").app)
    _, gw = start_gateway(serve, [up.url])
    assert httpx.post(f"{gw.url}/v1/chat/completions", content=b"{oops").status_code == 400
    response = httpx.post(f"{gw.url}/v1/chat/completions", json=chat(model="nope"))
    assert response.status_code == 404 and "not served here" in response.json()["error"]["message"]
    response = httpx.post(f"{gw.url}/v1/messages", json={"max_tokens": 3})
    assert response.status_code == 400 and response.json()["type"] == "error"
    assert [m["id"] for m in httpx.get(f"{gw.url}/v1/models").json()["data"]] == ["m"]


def test_replica_is_ejected_by_health_checks_and_readmitted_when_back(serve):
    upstream = Upstream("a")
    port = free_port()
    server = serve(upstream.app, port=port)
    spare = serve(Upstream("b").app)
    gateway, gw = start_gateway(serve, [{"url": server.url, "id": "a"}, {"url": spare.url, "id": "b"}])
    replica = gateway.pools["m"].replicas["a"]
    server.stop()
    wait_until(lambda: replica.breaker.is_open, "health checks to open the breaker")
    assert not replica.routable
    for _ in range(4):  # all served meanwhile, by the spare
        assert httpx.post(f"{gw.url}/v1/chat/completions", json=chat()).headers["x-chassis-replica"] == "b"
    serve(upstream.app, port=port)
    wait_until(lambda: replica.routable, "health checks to readmit the replica")
    state = httpx.get(f"{gw.url}/gateway/state").json()
    assert state["models"][0]["replicas"][0]["ejections"] == 1


def test_concurrent_streams_keep_in_flight_counts_right(serve):
    upstream = Upstream("a")
    upstream.gate = ChunkGate()  # every stream waits upstream until all 10 are in flight
    up = serve(upstream.app)
    gateway, gw = start_gateway(serve, [{"url": up.url, "id": "a"}], health_interval_s=60)
    replica = gateway.pools["m"].replicas["a"]
    errors = []

    def worker():
        try:
            with httpx.stream(
                "POST", f"{gw.url}/v1/chat/completions", json=chat(stream=True, max_tokens=5)
            ) as r:
                assert b"[DONE]" in b"".join(r.iter_raw())
        except Exception as exc:  # collected, asserted below
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(10)]
    for t in threads:
        t.start()
    wait_until(lambda: upstream.gate.waiting == 10, "10 streams held upstream at once")
    assert replica.in_flight == 10
    upstream.gate.release(10 * 5)
    for t in threads:
        t.join()
    assert errors == []
    # Counted upstream after each [DONE] has left, which can be after the client read it.
    wait_until(lambda: upstream.completed == 10, "the replica finishing all 10 streams")
    wait_until(lambda: replica.in_flight == 0, "no request in flight")  # released just after the last byte


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/messages"])
def test_client_errors_are_relayed_unchanged_and_never_count_against_the_replica(serve, path):
    picky, spare = Upstream("p"), Upstream("s")
    picky.mode = spare.mode = "status_400"
    urls = [{"url": serve(u.app).url, "id": u.replica_id} for u in (picky, spare)]
    gateway, gw = start_gateway(serve, urls, health_interval_s=60)
    for _ in range(6):  # three times the breaker's failure threshold on each replica
        response = httpx.post(f"{gw.url}{path}", json=chat())
        assert response.status_code == 400
        assert response.json() == client_error_body(path)
    assert len(picky.received) + len(spare.received) == 6  # answered, so never retried elsewhere
    for replica in gateway.pools["m"].replicas.values():
        assert not replica.breaker.is_open and replica.breaker.consecutive_failures == 0
    assert "chassis_gateway_upstream_errors_total{" not in httpx.get(f"{gw.url}/metrics").text
    picky.mode = spare.mode = "ok"
    assert httpx.post(f"{gw.url}{path}", json=chat()).status_code == 200


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/messages"])
def test_deeply_nested_json_is_a_400_at_the_gateway(serve, path):
    upstream = Upstream("a")
    _, gw = start_gateway(serve, [{"url": serve(upstream.app).url, "id": "a"}], health_interval_s=60)
    depth = 100_000
    body = '{"model": "m", "messages": ' + "[" * depth + "]" * depth + "}"
    response = httpx.post(f"{gw.url}{path}", content=body, headers={"content-type": "application/json"})
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error" and "nested" in error["message"]
    assert upstream.received == []
    assert httpx.post(f"{gw.url}{path}", json=chat()).status_code == 200


def test_token_ids_past_int64_are_routed_by_load_and_refused_by_the_replica(serve, tiny_checkpoint):
    upstream = Upstream("a")
    upstream.mode = "status_400"  # what a replica answers to token ids outside its vocabulary
    gateway, gw = start_gateway(
        serve,
        [{"url": serve(upstream.app).url, "id": "a"}],
        policy="cache_aware",
        tokenizer=tiny_checkpoint,
        health_interval_s=60,
    )
    pool = gateway.pools["m"]
    wait_until(lambda: pool.block_size and pool.tokenizer, "prefix matching to be ready")
    body = {"model": "m", "prompt": [1, 2, 3, 2**64 + 1] * 8, "max_tokens": 2}
    response = httpx.post(f"{gw.url}/v1/completions", json=body)
    assert response.status_code == 400 and response.json() == client_error_body("/v1/completions")
    assert len(upstream.received) == 1


def test_header_values_that_are_not_ascii_reach_the_replica_as_sent(serve):
    # HTTP allows any byte above 0x7f in a header value; re-encoding them as ASCII was a 500.
    upstream = Upstream("a")
    _, gw = start_gateway(serve, [{"url": serve(upstream.app).url, "id": "a"}], health_interval_s=60)
    headers = {"x-session-id": b"caf\xe9 \xff", "x-api-key": b"\xe9"}
    response = httpx.post(f"{gw.url}/v1/chat/completions", json=chat(), headers=headers)
    assert response.status_code == 200, response.text
    assert upstream.received_headers[0][b"x-session-id"] == b"caf\xe9 \xff"
    assert upstream.received_headers[0][b"x-api-key"] == b"\xe9"
