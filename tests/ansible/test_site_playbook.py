"""ansible/site.yml: syntax, then REAL runs on this machine (connection local) with every path in a
temporary directory, then a --check --diff run.

Four inventory hosts (control plane, NVIDIA node, Ascend node, monitoring) all use the local
connection, each with its own root under tmp. What cannot exist here is switched off by the
roles' own variables: apt packages, systemd (no systemd in this container), the venv build (the
repository's .venv is used instead), the GPU/NPU checks (no accelerators) and Grafana (the
loopback Grafana API from tests/dashboards stands in for it). The CANN ``set_env.sh`` is a small
script written by the test, standing in for the Ascend toolkit.
"""

from __future__ import annotations

import getpass
import grp
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.support.fake_grafana import FakeGrafana

REPO = Path(__file__).resolve().parents[2]
ANSIBLE_DIR = REPO / "ansible"
BIN = Path(sys.executable).parent
VENV = BIN.parent
HOSTS = {
    "cp-test": "control_plane",
    "gpu-test": "nvidia_nodes",
    "npu-test": "ascend_nodes",
    "mon-test": "monitoring",
}
GRAFANA_TOKEN = "glsa_ansible_test"
HEAD_COMMIT = subprocess.run(
    ["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
).stdout.strip()


def fake_grafana():
    return FakeGrafana(GRAFANA_TOKEN).start()


def playbook(inventory: Path, tmp: Path, *extra: str) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "ANSIBLE_CONFIG": str(ANSIBLE_DIR / "ansible.cfg"),
        "ANSIBLE_HOME": str(tmp / "ansible-home"),
        "ANSIBLE_BECOME": "false",  # already root or the owner of every path; no sudo here
        "ANSIBLE_GATHERING": "explicit",  # the roles need no facts when addresses are given
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_PIPELINING": "true",  # modules over stdin: fewer temporary files, a faster run
        "PATH": f"{BIN}:{os.environ['PATH']}",
    }
    cmd = [str(BIN / "ansible-playbook"), "-i", str(inventory), "site.yml", *extra]
    return subprocess.run(cmd, cwd=ANSIBLE_DIR, env=env, capture_output=True, text=True, timeout=420)


def recap(output: str) -> dict[str, dict[str, int]]:
    found = {}
    for host, counts in re.findall(r"^(\S+)\s+:\s+(ok=.*)$", output, re.MULTILINE):
        found[host] = {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", counts)}
    return found


def write_inventory(tmp: Path, grafana_url: str, overrides: dict | None = None) -> Path:
    set_env = tmp / "cann" / "set_env.sh"
    set_env.parent.mkdir(parents=True, exist_ok=True)
    set_env.write_text(
        "export ASCEND_TOOLKIT_HOME=/usr/local/Ascend/ascend-toolkit/latest\n"
        "export LD_LIBRARY_PATH=/usr/local/Ascend/driver/lib64:$LD_LIBRARY_PATH\n"
        "export ASCEND_RT_VISIBLE_DEVICES=0,1\n"
    )
    group_vars = {
        "ansible_connection": "local",
        "ansible_python_interpreter": sys.executable,
        "chassis_user": getpass.getuser(),
        "chassis_group": grp.getgrgid(os.getgid()).gr_name,
        "chassis_create_user": False,
        "chassis_become_service_user": False,
        "chassis_manage_packages": False,
        "chassis_manage_services": False,
        "chassis_install_venv": False,
        "chassis_venv": str(VENV),
        "chassis_secret_key": "test-secret",
        "chassis_database_url": "postgres://chassis:pw@db.internal:5432/chassis",
        "chassis_broker_url": "redis://redis.internal:6379/0",
        "chassis_archive_path": str(tmp / "chassis-source.tar.gz"),
        # One commit for every run: others commit to this tree while the test runs.
        "chassis_archive_version": HEAD_COMMIT,
        "chassis_node_address": "127.0.0.1",
        "control_plane_migrate": False,
        "control_plane_check_services": False,
        "control_plane_gateway_token": "viewer-token",
        "nvidia_node_check_driver": False,
        "ascend_node_check_npu": False,
        "ascend_node_cann_set_env": str(set_env),
        "monitoring_install_grafana": False,
        "monitoring_grafana_url": grafana_url,
        "monitoring_grafana_token": GRAFANA_TOKEN,
        "monitoring_control_plane_token": "viewer-token",
        **(overrides or {}),
    }
    children = {}
    for host, group in HOSTS.items():
        root = tmp / host
        host_vars = {
            "chassis_root": str(root / "opt/chassis"),
            "chassis_etc_dir": str(root / "etc/chassis"),
            "chassis_var_dir": str(root / "var/lib/chassis"),
            "chassis_systemd_dir": str(root / "etc/systemd/system"),
            "monitoring_prometheus_etc_dir": str(root / "etc/prometheus"),
            "tls_proxy_cert_dir": str(root / "etc/chassis/tls"),
            "tls_proxy_conf_dir": str(root / "etc/nginx/conf.d"),
        }
        children[group] = {"hosts": {host: host_vars}}
    children["nvidia_nodes"]["hosts"]["gpu-test"]["chassis_node_labels"] = {"pool": "batch"}
    # The GPU node mounts its checkpoints from a shared filesystem (a mount unit, checked below).
    children["nvidia_nodes"]["hosts"]["gpu-test"]["checkpoints_mode"] = "mount"
    children["nvidia_nodes"]["hosts"]["gpu-test"]["checkpoints_mount_what"] = "nfs-01.internal:/export/models"
    inventory = tmp / "inventory.yml"
    inventory.write_text(yaml.safe_dump({"all": {"vars": group_vars, "children": children}}))
    return inventory


def exec_start(unit: Path) -> list[str]:
    line = next(line for line in unit.read_text().splitlines() if line.startswith("ExecStart="))
    return [arg.replace("%%", "%") for arg in shlex.split(line.removeprefix("ExecStart="))]


def assert_real_command(argv: list[str]) -> None:
    """Run the command's own --help and check every flag the unit passes is one it accepts."""
    program = Path(argv[0])
    assert program.exists(), argv
    if program.name == "chassis":
        from chassis.main import build_parser

        build_parser().parse_args(argv[1:])  # exits (fails the test) on an unknown flag or value
        command = argv[:3] if argv[1] == "dashboards" else argv[:2]
        checks = [(command, argv[len(command) :])]
    elif argv[1:4] == ["-m", "celery", "-A"]:
        # python -m celery -A controlplane worker|beat ...: -A is celery's, the rest the subcommand's
        checks = [(argv[:3], ["-A"]), (argv[:6], argv[6:])]
    elif argv[1:3] == ["-m", "uvicorn"]:
        checks = [(argv[:3], argv[3:])]
    else:
        raise AssertionError(f"unexpected program in ExecStart: {argv}")
    for command, args in checks:
        result = subprocess.run([*command, "--help"], capture_output=True, text=True, timeout=60, cwd=REPO)
        assert result.returncode == 0, result.stderr
        flags = [arg.split("=")[0] for arg in args if arg.startswith("-")]
        assert flags or args == [], args
        for flag in flags:
            assert re.search(rf"(^|[\s,\[]){re.escape(flag)}\b", result.stdout), (
                f"{flag} not in {command} --help"
            )


@pytest.fixture(scope="module")
def deployed(tmp_path_factory):
    """Two real runs of site.yml (the second must change nothing), sharing one loopback Grafana."""
    tmp = tmp_path_factory.mktemp("ansible")
    grafana = fake_grafana()
    inventory = write_inventory(tmp, grafana.url)
    first = playbook(inventory, tmp)
    second = playbook(inventory, tmp)
    yield {"tmp": tmp, "first": first, "second": second, "grafana": grafana, "inventory": inventory}
    grafana.stop()


def test_syntax_check_and_example_inventory():
    result = subprocess.run(
        [str(BIN / "ansible-playbook"), "--syntax-check", "-i", "inventory.example.yml", "site.yml"],
        cwd=ANSIBLE_DIR, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    listed = subprocess.run(
        [str(BIN / "ansible-inventory"), "-i", "inventory.example.yml", "--list"],
        cwd=ANSIBLE_DIR, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    groups = json.loads(listed.stdout)
    for group in ("database", "control_plane", "nvidia_nodes", "ascend_nodes", "monitoring"):
        assert groups[group]["hosts"], group


def test_site_runs_and_a_second_run_changes_nothing(deployed):
    first, second = deployed["first"], deployed["second"]
    assert first.returncode == 0, first.stdout[-4000:] + first.stderr[-2000:]
    assert second.returncode == 0, second.stdout[-4000:] + second.stderr[-2000:]
    assert set(recap(first.stdout)) == set(HOSTS)
    assert all(counts["changed"] > 0 for counts in recap(first.stdout).values())
    assert all(
        counts["changed"] == 0 and counts["failed"] == 0 for counts in recap(second.stdout).values()
    ), second.stdout[-4000:]


def test_every_unit_runs_a_real_command(deployed):
    tmp = deployed["tmp"]
    units = sorted(tmp.glob("*/etc/systemd/system/*.service"))
    names = sorted(f"{u.parts[-5]}/{u.name}" for u in units)
    assert names == [
        "cp-test/chassis-beat.service", "cp-test/chassis-gateway.service", "cp-test/chassis-web.service",
        "cp-test/chassis-worker.service", "gpu-test/chassis-agent.service", "mon-test/chassis-prometheus-targets.service",
        "npu-test/chassis-agent.service",
    ]  # fmt: skip
    for unit in units:
        assert "{{" not in unit.read_text() and "{%" not in unit.read_text(), unit
        assert_real_command(exec_start(unit))
    # systemd's own check of every unit (syntax, absolute executables, a mount unit named after its
    # path); it needs no running systemd.
    mounts = sorted(tmp.glob("*/etc/systemd/system/*.mount"))
    assert [m.parts[-5] for m in mounts] == ["gpu-test"]
    assert f"Where={tmp}/gpu-test/var/lib/chassis/models" in mounts[0].read_text()
    verify = subprocess.run(
        ["systemd-analyze", "verify", *map(str, units + mounts)], capture_output=True, text=True, timeout=120
    )
    assert verify.returncode == 0 and verify.stderr.strip() == "", verify.stderr

    gpu_agent = exec_start(tmp / "gpu-test/etc/systemd/system/chassis-agent.service")
    assert gpu_agent[1:4] == ["agent", "--node", "gpu-test"]  # its Celery queue is node.gpu-test
    assert "pool=batch" in gpu_agent and "vendor=nvidia" in gpu_agent
    worker = exec_start(tmp / "cp-test/etc/systemd/system/chassis-worker.service")
    assert worker[worker.index("-n") + 1] == "controlplane@%h"  # Celery's %h survived systemd's escaping
    targets = exec_start(tmp / "mon-test/etc/systemd/system/chassis-prometheus-targets.service")
    assert targets[targets.index("--gateway") + 1] == "127.0.0.1:8080"


def test_ascend_agent_gets_cann_env_but_not_a_pinned_device_list(deployed):
    root = deployed["tmp"] / "npu-test"
    unit = (root / "etc/systemd/system/chassis-agent.service").read_text()
    assert "UnsetEnvironment=ASCEND_RT_VISIBLE_DEVICES" in unit
    assert f"EnvironmentFile=-{root}/etc/chassis/cann.env" in unit
    cann = (root / "etc/chassis/cann.env").read_text()
    assert "ASCEND_TOOLKIT_HOME=/usr/local/Ascend/ascend-toolkit/latest" in cann
    assert re.search(r"^LD_LIBRARY_PATH=/usr/local/Ascend/driver/lib64", cann, re.MULTILINE)
    assert not re.search(r"^ASCEND_RT_VISIBLE_DEVICES=", cann, re.MULTILINE)  # set_env.sh's 0,1 dropped


def test_code_env_and_monitoring_files(deployed):
    tmp = deployed["tmp"]
    assert (tmp / "cp-test/opt/chassis/manage.py").is_file()  # the checkout's HEAD, unpacked
    env = (tmp / "cp-test/etc/chassis/chassis.env").read_text()
    assert "DATABASE_URL=postgres://chassis:pw@db.internal:5432/chassis" in env and "DEBUG=false" in env
    assert oct((tmp / "cp-test/etc/chassis/chassis.env").stat().st_mode & 0o777) == "0o640"
    prometheus = tmp / "mon-test/etc/prometheus"
    assert (prometheus / "prometheus.yml").read_text() == (
        REPO / "dashboards/prometheus/prometheus.yml"
    ).read_text()
    assert (prometheus / "rules/chassis-alerts.yml").is_file()
    # The monitoring role provisioned Grafana through `chassis dashboards provision`, once.
    grafana = deployed["grafana"]
    assert sorted(grafana.dashboards) == ["chassis-control-plane", "chassis-engine", "chassis-gateway"]
    assert all(d["dashboard"]["version"] == 1 for d in grafana.dashboards.values())


def test_check_mode_shows_the_diff_and_writes_nothing(deployed):
    tmp = deployed["tmp"]
    web = tmp / "cp-test/etc/systemd/system/chassis-web.service"
    before = web.read_text()
    inventory = write_inventory(tmp, deployed["grafana"].url, {"control_plane_port": 8001})
    result = playbook(inventory, tmp, "--check", "--diff", "--limit", "cp-test")
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert re.search(r"^\+ExecStart=.*--port 8001", result.stdout, re.MULTILINE)
    assert re.search(r"^-ExecStart=.*--port 8000", result.stdout, re.MULTILINE)
    assert web.read_text() == before


def test_postgresql_and_redis_install_path_in_check_mode(tmp_path):
    """The database play as on a fresh host (packages and services aside): its edits of
    postgresql.conf, pg_hba.conf and redis.conf show in --check --diff, and nothing is written."""
    configs = {
        tmp_path / "pg/postgresql.conf": "#listen_addresses = 'localhost'\nport = 5432\n",
        tmp_path / "pg/pg_hba.conf": "local all postgres peer\n",
        tmp_path / "redis/redis.conf": "bind 127.0.0.1 -::1\nport 6379\n",
    }
    for path, text in configs.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    host = {
        "ansible_connection": "local",
        "ansible_python_interpreter": sys.executable,
        "chassis_manage_packages": False,
        "chassis_manage_services": False,
        "postgresql_install": True,
        "postgresql_create_database": False,
        "postgresql_conf_dir": str(tmp_path / "pg"),
        "postgresql_client_networks": ["10.0.0.0/16"],
        "redis_conf": str(tmp_path / "redis/redis.conf"),
        "redis_password": "redis-pw",
    }
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(yaml.safe_dump({"all": {"children": {"database": {"hosts": {"db-test": host}}}}}))
    result = playbook(inventory, tmp_path, "--check", "--diff")
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    for line in ("+listen_addresses = '*'", "+host chassis chassis 10.0.0.0/16 scram-sha-256",
                 "+bind 0.0.0.0", "+requirepass redis-pw", f"+include {tmp_path}/redis/chassis.conf"):  # fmt: skip
        assert line in result.stdout, (line, result.stdout[-4000:])
    assert all(path.read_text() == text for path, text in configs.items())
    assert not (tmp_path / "redis/chassis.conf").exists()
