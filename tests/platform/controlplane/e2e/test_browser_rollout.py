"""Safe rollouts end to end: the real worker, beat and agent, `chassis serve` replicas, a `chassis
gateway` reading the control plane, a load generator through the gateway, and Playwright on the
deployment page: a bad option is refused, a new checkpoint rolls out with no failed request, a
broken revision stops and the old replica keeps serving, rollback, and a rolling restart."""

import json
import shutil
import threading
import time
from collections import Counter

import httpx
import pytest
from controlplane.serving.choices import ReplicaState as S

from gateway.bench.cluster import Process, _chassis
from tests.support.browser import check_layout, log_in, make_user
from tests.support.ports import free_port
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.browser, pytest.mark.timeout(600)]
MODEL = "roll"


class Load:
    """One client sending chats through the gateway until stopped, counting answers per replica."""

    def __init__(self, url: str) -> None:
        self.url, self.served, self.failures = url, Counter(), []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
        with httpx.Client(timeout=60) as client:
            while not self._stop.is_set():
                try:
                    reply = client.post(f"{self.url}/v1/chat/completions", json=body)
                except httpx.HTTPError as exc:
                    self.failures.append(repr(exc))
                    continue
                if reply.status_code == 200:
                    self.served[reply.headers["x-chassis-replica"]] += 1
                else:
                    self.failures.append(f"{reply.status_code} {reply.text[:300]}")

    def start(self) -> "Load":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(90)

    def total(self) -> int:
        return sum(self.served.values())


def ready_checkpoint(name: str, path):
    from controlplane.checkpoints.models import Checkpoint

    checkpoint = Checkpoint.objects.create(name=name, path=str(path))
    checkpoint.start_validation()
    checkpoint.mark_ready({})
    return checkpoint


def api_token(role: str) -> str:
    from io import StringIO

    from django.core.management import call_command

    out = StringIO()
    call_command("create_api_token", f"rollout-{role}", "--role", role, stdout=out)
    return out.getvalue().strip()


def test_rollouts_rollback_and_restart_keep_serving(
    stack, live_server, browser, operator_api, tiny_model_dir, tmp_path
):
    from controlplane.fleet.models import Node
    from controlplane.serving.models import Deployment, Replica

    second = shutil.copytree(tiny_model_dir, tmp_path / "tiny-b")
    broken = shutil.copytree(tiny_model_dir, tmp_path / "tiny-broken")
    for weights in broken.glob("*.safetensors"):
        weights.write_bytes(b"not a safetensors file")
    make_user("rita", "operator")
    stack.start_all()
    gateway_port = free_port()
    settings_file = tmp_path / "gateway.json"
    settings_file.write_text(json.dumps({"refresh_interval_s": 0.5, "health_interval_s": 0.5}))
    gateway = Process("gateway", _chassis("gateway", "--port", str(gateway_port), "--control-plane", live_server.url,
                      "--token", api_token("viewer"), "--settings", str(settings_file), "--log-level", "warning"),
                      gateway_port, tmp_path / "gateway.log")  # fmt: skip
    load = None
    try:
        wait_until(
            lambda: Node.objects.filter(name=stack.node).exists(),
            "the agent to register",
            timeout=60,
            poll=0.5,
        )
        first = ready_checkpoint("tiny", tiny_model_dir)
        new = ready_checkpoint("tiny-b", second)
        bad = ready_checkpoint("tiny-broken", broken)
        response = operator_api.post(
            "/api/v1/deployments/",
            {"name": MODEL, "checkpoint": first.pk, "replicas": 1, "vendor": "cpu"},
            format="json",
        )
        assert response.status_code == 201, response.json()
        deployment = Deployment.objects.get(pk=response.json()["id"])
        active = deployment.replica_set.exclude(state=S.STOPPED)
        wait_until(lambda: active.filter(state=S.READY).exists(), "the first replica", timeout=180, poll=0.5)
        gateway.start().wait_ready("/health", time.monotonic() + 60)
        load = Load(gateway.url).start()
        wait_until(lambda: load.total() > 0, "the load to be served", timeout=60, poll=0.2)

        page = log_in(browser, live_server.url, "rita")
        page.goto(f"{live_server.url}/deployments/{deployment.pk}/")
        page.fill("#id_engine_options", '{"max_num_seqs": "many"}')
        page.click("#revision-form button[type=submit]")
        assert (
            "max_num_seqs: argument --max-num-seqs: invalid int value"
            in page.locator("#revision-form .error").inner_text()
        )
        assert deployment.revisions.count() == 1

        # A new checkpoint: surge, wait until ready, drain the old replica; not one request fails.
        page.goto(f"{live_server.url}/deployments/{deployment.pk}/")
        page.select_option("#id_checkpoint", str(new.pk))
        page.click("#revision-form button[type=submit]")
        page.locator("#rollout[data-status=progressing]").wait_for()
        check_layout(page, "deployment-rolling-out")

        def rolled_out(number):
            deployment.refresh_from_db()
            states = set(active.values_list("revision__number", "state"))
            return deployment.rollout_status == "complete" and states == {(number, S.READY)}

        wait_until(lambda: rolled_out(2), "revision 2 to roll out", timeout=240, poll=0.5)
        new_replica = active.get()
        wait_until(
            lambda: load.served[str(new_replica)] > 0, "the new revision to serve", timeout=60, poll=0.2
        )
        page.locator("#rollout[data-status=complete]").wait_for()
        assert page.locator(f"#replica-{new_replica.pk} td.revision").inner_text() == "2"

        # A revision whose weights are corrupt: its replica fails, the rollout stops, revision 2 serves on.
        page.select_option("#id_checkpoint", str(bad.pk))
        page.click("#revision-form button[type=submit]")
        page.locator("#rollout[data-status=failed]").wait_for(timeout=240_000)
        rollout_text = page.locator("#rollout").inner_text()
        assert "revision 3 stopped" in rollout_text and "failed to become ready" in rollout_text
        assert Replica.objects.get(pk=new_replica.pk).state == S.READY
        served_before = load.total()
        wait_until(
            lambda: load.total() > served_before + 3,
            "requests to go on after the failure",
            timeout=60,
            poll=0.2,
        )
        wait_until(
            lambda: not active.filter(revision__number=3).exists(),
            "the broken replica to stop",
            timeout=60,
            poll=0.5,
        )
        check_layout(page, "deployment-rollout-failed")

        # Rollback to the previous revision, one button.
        page.click("#revision-2 button")
        wait_until(
            lambda: rolled_out(2) and deployment.revision.number == 2, "the rollback", timeout=60, poll=0.5
        )
        page.locator("#rollout[data-status=complete]").wait_for()
        assert Replica.objects.get(pk=new_replica.pk).state == S.READY

        # Rolling restart: the old replica stays ready until its replacement is.
        page.click("#restart-form button")
        wait_until(
            lambda: Replica.objects.get(pk=new_replica.pk).state == S.STOPPED,
            "the restart",
            timeout=240,
            poll=0.5,
        )
        fresh = active.get()
        assert fresh.state == S.READY and fresh.revision.number == 2
        ready_at = fresh.events.get(to_state=S.READY).pk
        assert new_replica.events.get(to_state=S.DRAINING).pk > ready_at
        wait_until(
            lambda: load.served[str(fresh)] > 0, "the restarted replica to serve", timeout=60, poll=0.2
        )
        load.stop()
        by_revision = Counter()
        for name, count in load.served.items():
            by_revision[
                Replica.objects.get(
                    deployment=deployment, ordinal=int(name.rsplit("-", 1)[1])
                ).revision.number
            ] += count
        assert load.failures == []
        assert by_revision[1] > 0 and by_revision[2] > 0, by_revision
        check_layout(page, "deployment-after-restart")

        # No replica ready: the gateway names the deployment's state instead of "not served here".
        operator_api.post(f"/api/v1/deployments/{deployment.pk}/scale/", {"replicas": 0}, format="json")

        def refused():
            reply = httpx.post(f"{gateway.url}/v1/chat/completions", timeout=30,
                               json={"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2})  # fmt: skip
            return reply if reply.status_code == 503 and "scaled to 0" in reply.text else None

        reply = wait_until(
            refused, "the gateway to answer 503 for the scaled-down deployment", timeout=60, poll=0.5
        )
        assert reply.json()["error"]["code"] == "no_ready_replica"
    except BaseException:
        print(stack.logs())
        print(
            (tmp_path / "gateway.log").read_text(errors="replace")[-3000:]
            if (tmp_path / "gateway.log").exists()
            else ""
        )
        raise
    finally:
        if load is not None:
            load.stop()
        gateway.stop()
