"""Acceptance 1 of issue 22: site.yml against this machine as two hosts, the control-plane host in
this network namespace and an engine node in a second one (ip netns, a veth pair between them).

What runs for real: the playbook, twice (the rerun must change nothing), connection local, the
node's modules inside its namespace (its Python interpreter is ``ip netns exec NS python``); the
postgresql role creating this test's database and checking its role on the machine's PostgreSQL
(postgresql_install off: the server is the machine's own, already running); Redis likewise
(redis_install off); migrations, the first admin (createsuperuser) and the service tokens minted by
the playbook; a self-signed certificate and the nginx site the tls_proxy role writes; the checkpoint
rsynced to the node by the checkpoints role; then every rendered unit's ExecStart with its
environment (web, worker, beat, gateway here, the agent in the node's namespace) and nginx on the
rendered site; the agent launches a replica on the node; chromium in the node's namespace logs in
over HTTPS to the control-plane host's address; the gateway answers through nginx only with a
client key, the replica only with the replica key.

What cannot run here: systemd (no init in this container: units are started from their ExecStart
by tests/support/systemd_units.py, and ``systemd-analyze verify`` checks them where it works), apt on
a fresh host (chassis_manage_packages is off; that path is checked by --check in
test_site_playbook.py and by ansible-lint), a second kernel (both hosts share this machine's
filesystem; each has its own root under tmp). The machine's PostgreSQL and Redis listen on loopback
only, so the node reaches them through a forwarder on the control-plane address.
"""

from __future__ import annotations

import json
import os
import ssl
import subprocess
import sys
import uuid
import warnings
from pathlib import Path

import httpx
import pytest
import yaml

from tests.ansible.test_site_playbook import HEAD_COMMIT, playbook, recap
from tests.support.https_login import answered
from tests.support.systemd_units import start_unit
from tests.support.tcp_forward import TcpForward
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

REPO = Path(__file__).resolve().parents[2]
VENV = Path(sys.executable).parent.parent
TAG = uuid.uuid4().hex[:6]
NETNS = f"chassis-node-{TAG}"
CP, NODE = "10.231.7.1", "10.231.7.2"
HTTPS, GATEWAY_TLS, HTTP = 18443, 18444, 18081
DATABASE = f"chassis_ansible_{TAG}"
ADMIN_PASSWORD = "ansible-admin-pw-1"
CLIENT_KEY, REPLICA_KEY = f"client-{TAG}", f"replica-{TAG}"
CP_UNITS = ["chassis-web", "chassis-worker", "chassis-beat", "chassis-gateway"]


def sh(*argv: str) -> str:
    return subprocess.run(argv, check=True, capture_output=True, text=True, timeout=60).stdout


def create_namespace() -> None:
    host_if, node_if = f"vh{TAG}", f"vn{TAG}"
    sh("ip", "netns", "add", NETNS)
    sh("ip", "link", "add", host_if, "type", "veth", "peer", "name", node_if)
    sh("ip", "link", "set", node_if, "netns", NETNS)
    sh("ip", "addr", "add", f"{CP}/24", "dev", host_if)
    sh("ip", "link", "set", host_if, "up")
    sh("ip", "netns", "exec", NETNS, "ip", "addr", "add", f"{NODE}/24", "dev", node_if)
    sh("ip", "netns", "exec", NETNS, "ip", "link", "set", node_if, "up")
    sh("ip", "netns", "exec", NETNS, "ip", "link", "set", "lo", "up")


def write_inventory(tmp: Path, checkpoint: Path) -> Path:
    node_python = tmp / "node-python"
    node_python.write_text(f'#!/bin/sh\nexec ip netns exec {NETNS} {sys.executable} "$@"\n')
    node_python.chmod(0o755)

    def host_root(name: str) -> dict:
        root = tmp / name
        return {
            "chassis_root": str(root / "opt/chassis"),
            "chassis_etc_dir": str(root / "etc/chassis"),
            "chassis_var_dir": str(root / "var/lib/chassis"),
            "chassis_systemd_dir": str(root / "etc/systemd/system"),
        }

    shared = {
        "ansible_connection": "local",
        "ansible_python_interpreter": sys.executable,
        "chassis_user": "root",
        "chassis_group": "root",
        "chassis_create_user": False,
        "chassis_become_service_user": False,
        "chassis_manage_packages": False,
        "chassis_manage_services": False,
        "chassis_install_venv": False,
        "chassis_venv": str(VENV),
        "chassis_archive_path": str(tmp / "chassis-source.tar.gz"),
        "chassis_archive_version": HEAD_COMMIT,
        "chassis_secret_key": f"two-hosts-{TAG}",
        "chassis_database_url": f"postgres://chassis:chassis@{CP}:5432/{DATABASE}",
        "chassis_broker_url": f"redis://{CP}:6379/7",
        "chassis_result_backend": f"redis://{CP}:6379/8",
        "chassis_public_url": f"https://{CP}:{HTTPS}",
        "chassis_allowed_hosts": [CP, "127.0.0.1", "localhost"],
        "chassis_control_plane_url": "http://127.0.0.1:18000",
        "chassis_gateway_port": 18080,
        "chassis_replica_api_key": REPLICA_KEY,
        "chassis_extra_env": {
            "CHASSIS_RECONCILE_INTERVAL_S": 1,
            "CHASSIS_SCRAPE_INTERVAL_S": 2,
            "CHASSIS_HEARTBEAT_CHECK_INTERVAL_S": 2,
            "CHASSIS_LAUNCH_GRACE_S": 5,
        },
        "control_plane_port": 18000,
        "control_plane_worker_metrics_port": 18808,
        "control_plane_worker_concurrency": 2,
        "control_plane_web_workers": 1,
    }
    cp_host = {
        **host_root("cp"),
        "chassis_node_address": CP,
        "postgresql_install": False,
        "postgresql_create_database": True,
        "postgresql_db_name": DATABASE,
        "postgresql_db_password": "chassis",
        "ansible_become_method": "su",
        # Modules the postgres user runs (su) cannot read this virtualenv; builtin modules need only
        # the standard library.
        "ansible_python_interpreter": "/usr/bin/python3",
        "redis_install": False,
        "control_plane_admin_password": ADMIN_PASSWORD,
        "tls_proxy_cert_dir": str(tmp / "cp/etc/chassis/tls"),
        "tls_proxy_conf_dir": str(tmp / "cp/etc/nginx/conf.d"),
        "tls_proxy_https_port": HTTPS,
        "tls_proxy_http_port": HTTP,
        "tls_proxy_gateway_port": GATEWAY_TLS,
        "tls_proxy_gateway_api_keys": [CLIENT_KEY],
    }
    node_host = {
        **host_root("node"),
        "ansible_python_interpreter": str(node_python),
        "chassis_node_address": NODE,
        "chassis_node_name": f"node-{TAG}",
        "nvidia_node_check_driver": False,
        "checkpoints_mode": "rsync",
        "checkpoints_rsync_source": str(checkpoint),
        "checkpoints_dir": str(tmp / "node/var/lib/chassis/models/tiny"),
    }
    inventory = {
        "all": {
            "vars": shared,
            "children": {
                "database": {"hosts": {"cp-host": cp_host}},
                "control_plane": {"hosts": {"cp-host": {}}},
                "nvidia_nodes": {"hosts": {"node-host": node_host}},
            },
        }
    }
    path = tmp / "inventory.yml"
    path.write_text(yaml.safe_dump(inventory))
    return path


def start_nginx(tmp: Path) -> subprocess.Popen:
    run = tmp / "nginx"
    run.mkdir(exist_ok=True)
    conf = run / "nginx.conf"
    conf.write_text(
        f"pid {run}/nginx.pid;\nerror_log {tmp}/logs/nginx-error.log info;\nworker_processes 1;\nevents {{}}\n"
        f"http {{\n  access_log {tmp}/logs/nginx-access.log;\n  client_body_temp_path {run}/body;\n  proxy_temp_path {run}/proxy;\n"
        f"  fastcgi_temp_path {run}/fastcgi;\n  uwsgi_temp_path {run}/uwsgi;\n  scgi_temp_path {run}/scgi;\n"
        f"  include {tmp}/cp/etc/nginx/conf.d/chassis.conf;\n}}\n"
    )
    sh("nginx", "-t", "-c", str(conf))
    return subprocess.Popen(["nginx", "-c", str(conf), "-g", "daemon off;"], start_new_session=True)


def manage(tmp: Path, *args: str) -> str:
    env = {**os.environ, "DATABASE_URL": f"postgres://chassis:chassis@127.0.0.1:5432/{DATABASE}",
           "CELERY_BROKER_URL": "redis://127.0.0.1:6379/7", "SECRET_KEY": "x", "DEBUG": "false",
           "CHASSIS_VAR_DIR": str(tmp / "cp/var/lib/chassis")}  # fmt: skip
    return subprocess.run(
        [sys.executable, "manage.py", *args], cwd=REPO, env=env, check=True, capture_output=True, text=True
    ).stdout.strip()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, tiny_checkpoint):
    tmp = tmp_path_factory.mktemp("two-hosts")
    create_namespace()
    forwards = [TcpForward((CP, 5432), ("127.0.0.1", 5432)), TcpForward((CP, 6379), ("127.0.0.1", 6379))]
    processes: list[subprocess.Popen] = []
    try:
        inventory = write_inventory(tmp, tiny_checkpoint)
        first = playbook(inventory, tmp)
        assert first.returncode == 0, first.stdout[-6000:] + first.stderr[-2000:]
        logs = tmp / "logs"
        logs.mkdir()
        units = tmp / "cp/etc/systemd/system"
        processes.append(start_nginx(tmp))
        for name in CP_UNITS:
            processes.append(start_unit(units / f"{name}.service", tmp / "run", logs, REPO))
        node_unit = tmp / "node/etc/systemd/system/chassis-agent.service"
        processes.append(start_unit(node_unit, tmp / "run", logs, REPO, netns=NETNS))
        yield {"tmp": tmp, "inventory": inventory, "first": first, "logs": logs}
    finally:
        for process in processes:
            try:
                os.killpg(process.pid, 15)
            except ProcessLookupError:
                pass
        for process in processes:
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, 9)
        for pid in subprocess.run(
            ["ip", "netns", "pids", NETNS], capture_output=True, text=True
        ).stdout.split():
            try:
                os.kill(int(pid), 9)
            except ProcessLookupError:
                pass
        for forward in forwards:
            forward.close()
        subprocess.run(["ip", "netns", "del", NETNS], capture_output=True)
        subprocess.run(
            ["su", "postgres", "-c", f"dropdb --if-exists --force {DATABASE}"], capture_output=True
        )


def logs_of(cluster, *names: str) -> str:
    """The last lines of the named logs (every log when none is named)."""
    paths = [cluster["logs"] / f"{name}.log" for name in names] or sorted(cluster["logs"].glob("*.log"))
    return "\n".join(f"--- {p.name}\n{p.read_text()[-3000:]}" for p in paths if p.exists())


def serves(url: str, tls: ssl.SSLContext) -> bool:
    try:
        return httpx.get(url, verify=tls, timeout=10).status_code == 200
    except httpx.HTTPError:
        return False


def browser_login(base: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["ip", "netns", "exec", NETNS, sys.executable, "-m", "tests.support.https_login", base, "admin", ADMIN_PASSWORD],
        cwd=REPO, capture_output=True, text=True, timeout=400,
    )  # fmt: skip


def never_answered(login: subprocess.CompletedProcess, base: str) -> bool:
    """The browser's navigation deadline passed before any answer to its first request of the
    login page (tests.support.https_login traces each request on stderr)."""
    return "Page.goto: Timeout" in login.stderr and not answered(login.stderr, f"{base}/login/")


def test_two_hosts_tls_login_replica_and_a_rerun_that_changes_nothing(cluster):
    tmp = cluster["tmp"]
    cert = tmp / "cp/etc/chassis/tls/chassis.crt"
    tls = ssl.create_default_context(cafile=str(cert))  # the certificate names the address it serves
    base = f"https://{CP}:{HTTPS}"
    wait_until(lambda: httpx.get(f"{base}/health", verify=tls, timeout=5).status_code == 200,
               "the control plane through nginx", timeout=90, poll=1)  # fmt: skip
    # Every web worker up and the login page served, before the browser's own deadlines start:
    # the units start all at once, and on a busy CI machine /health can answer long before that.
    wait_until(lambda: all(serves(f"{base}/login/", tls) for _ in range(4)), "the login page through nginx",
               timeout=180, poll=1)  # fmt: skip

    # A browser on the node's address logs in over HTTPS with the admin the playbook made.
    login = browser_login(base)
    if login.returncode != 0 and never_answered(login, base):
        # Twice in about twenty CI runs the browser's first request of the login page got no answer
        # for its whole 90 s deadline, right after the same page answered four GETs through nginx.
        # Not the control plane: nginx answers 504 after its 60 s proxy timeouts when the upstream
        # hangs, and chromium gives up on a TLS handshake at 30 s. The request trace and nginx's logs
        # of such a run go into the warning; the second attempt must pass, and any other failure
        # (an error answer, a wrong page, a login refused) fails at once.
        warnings.warn(f"the browser's login page got no answer; retried once\n{login.stderr[-3000:]}\n"
                      f"{logs_of(cluster, 'nginx-access', 'nginx-error')}", stacklevel=1)  # fmt: skip
        login = browser_login(base)
    assert login.returncode == 0, (
        login.stderr[-4000:] + "\n" + logs_of(cluster, "nginx-access", "nginx-error", "chassis-web")
    )
    seen = json.loads(login.stdout.strip().splitlines()[-1])
    assert seen["url"] == f"{base}/"
    assert seen["secure_cookies"]["sessionid"] and seen["secure_cookies"]["csrftoken"]
    assert "admin" in seen["body"]

    # The agent in the node's namespace registers; a deployment of the rsynced checkpoint gets a replica.
    operator = manage(tmp, "create_api_token", f"ops-{TAG}", "--role", "operator")
    api = httpx.Client(
        base_url=f"{base}/api/v1", verify=tls, headers={"Authorization": f"Bearer {operator}"}, timeout=30
    )
    wait_until(lambda: [n for n in api.get("/nodes/").json()["results"] if n["state"] == "up"],
               f"the agent to register\n{logs_of(cluster)}", timeout=120, poll=1)  # fmt: skip
    checkpoint = api.post(
        "/checkpoints/", json={"name": "tiny", "path": str(tmp / "node/var/lib/chassis/models/tiny")}
    )
    assert checkpoint.status_code == 201, checkpoint.text
    wait_until(lambda: api.get(f"/checkpoints/{checkpoint.json()['id']}/").json()["state"] == "ready",
               "the checkpoint to validate", timeout=60, poll=1)  # fmt: skip
    deployment = api.post("/deployments/", json={"name": "tiny", "served_model_name": "tiny-chat",
                                                 "checkpoint": checkpoint.json()["id"], "replicas": 1, "vendor": "cpu"})  # fmt: skip
    assert deployment.status_code == 201, deployment.text
    replica = wait_until(
        lambda: next((r for r in api.get("/replicas/").json()["results"] if r["state"] == "ready"), None),
        f"a ready replica\n{logs_of(cluster)}",
        timeout=180,
        poll=1,
    )
    assert f"//{NODE}:" in replica["url"]
    # Its log is a file on the node, served to the control plane by the node's agent.
    assert list((tmp / "node/var/lib/chassis/replicas").glob("tiny-*.log"))
    log = api.get(f"/replicas/{replica['id']}/log/").json()
    assert log["node"] == f"node-{TAG}" and not log["missing"] and "chassis serve" in log["log"], log

    # The replica wants its key; the gateway behind nginx wants a client key and forwards the replica's.
    assert httpx.get(f"{replica['url']}/v1/models", timeout=10).status_code == 401
    with_key = {"Authorization": f"Bearer {REPLICA_KEY}"}
    assert httpx.get(f"{replica['url']}/v1/models", headers=with_key, timeout=10).status_code == 200
    gateway = f"https://{CP}:{GATEWAY_TLS}/v1/chat/completions"
    body = {"model": "tiny-chat", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 4}
    assert httpx.post(gateway, json=body, verify=tls, timeout=30).status_code == 401
    answer = wait_until(
        lambda: (r := httpx.post(gateway, json=body, verify=tls, timeout=60, headers={"Authorization": f"Bearer {CLIENT_KEY}"})).status_code == 200 and r,
        "the gateway to route to the replica", timeout=60, poll=1,
    )  # fmt: skip
    assert answer.json()["choices"][0]["message"]["content"] is not None

    # A rerun against the running cluster changes nothing on either host.
    second = playbook(cluster["inventory"], tmp)
    assert second.returncode == 0, second.stdout[-6000:] + second.stderr[-2000:]
    counts = recap(second.stdout)
    assert set(counts) == {"cp-host", "node-host"}
    assert all(c["changed"] == 0 and c["failed"] == 0 for c in counts.values()), second.stdout[-6000:]
