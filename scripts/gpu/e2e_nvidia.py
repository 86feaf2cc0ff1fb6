"""A real node end to end, through the platform's own parts and APIs only.

`chassis up` (SQLite, filesystem broker; web, Celery worker and beat, the node agent, the gateway),
an admin token from `manage.py create_api_token`, then over the REST API: the node the agent
registered (its accelerators from the NVML probe), a random-weight checkpoint (Llama-3.1-8B's shape
on CUDA, `tiny-llama` with --tiny) registered and validated, a one-replica deployment placed and
launched by the agent, and one streamed chat request through the gateway, timed with
measurement/sse.py. Every phase prints its time; a failed phase names itself and the tail of the log
that says why. Usage: scripts/gpu/e2e_nvidia.sh (--help for the options).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO)]

import httpx  # noqa: E402

from measurement.sse import StreamTimer, time_stream  # noqa: E402

NODE = "e2e-node"
DEPLOYMENT = "e2e-llama"
PROMPT = " ".join(f"t{i}" for i in range(100, 132))  # 32 tokens of the id tokenizer
T0 = time.monotonic()
BUDGET_END = [T0 + 480.0]  # --budget moves it


class PhaseFailed(Exception):
    def __init__(self, phase: str, why: str, log: Path | None = None):
        super().__init__(phase, why, log)
        self.phase, self.why, self.log = phase, why, log


def say(message: str) -> None:
    print(f"[e2e {time.monotonic() - T0:7.1f}s] {message}", flush=True)


def tail(path: Path | None, lines: int = 40) -> str:
    if path is None or not path.is_file():
        return f"(no log at {path})"
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def wait_for(phase: str, condition, timeout: float, log: Path | None, poll: float = 1.0):
    """The first truthy value of ``condition()``; PhaseFailed after ``timeout`` seconds or at the
    overall budget, whichever comes first. The condition may raise PhaseFailed itself to stop
    waiting on a state that cannot get better."""
    deadline = min(time.monotonic() + timeout, BUDGET_END[0])
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise PhaseFailed(phase, f"not done within {timeout:g}s (or the overall budget)", log)
        time.sleep(poll)


class Platform:
    """`chassis up` as a child process, with its state directory and logs."""

    def __init__(self, var_dir: Path, port: int, gateway_port: int):
        self.var_dir, self.port, self.gateway_port = var_dir, port, gateway_port
        self.log_dir = var_dir / "log"
        self.up_log = var_dir / "up.log"
        self.env = {
            k: v
            for k, v in os.environ.items()
            if k not in {"DATABASE_URL", "CELERY_BROKER_URL", "CELERY_RESULT_BACKEND"}
        }  # embedded defaults: SQLite and the filesystem broker under var_dir
        self.env.update(CHASSIS_VAR_DIR=str(var_dir), PYTHONUNBUFFERED="1")
        self.process: subprocess.Popen | None = None
        self.api = f"http://127.0.0.1:{port}/api/v1"
        self.gateway = f"http://127.0.0.1:{gateway_port}"

    def start(self) -> None:
        self.var_dir.mkdir(parents=True, exist_ok=True)
        command = [
            sys.executable, "-m", "chassis", "up", "--no-demo", "--node", NODE,
            "--port", str(self.port), "--gateway-port", str(self.gateway_port),
            "--worker-metrics-port", "0", "--worker-concurrency", "2", "--log-level", "info",
            "--ready-timeout", "120",
        ]  # fmt: skip
        self.process = subprocess.Popen(
            command,
            cwd=REPO,
            env=self.env,
            stdout=self.up_log.open("w"),
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )

    def check_alive(self, phase: str) -> None:
        if self.process is not None and self.process.poll() is not None:
            raise PhaseFailed(phase, f"`chassis up` exited with {self.process.returncode}", self.up_log)

    def ready(self) -> bool:
        self.check_alive("control plane up")
        return "chassis up: ready." in self.up_log.read_text(errors="replace")

    def admin_token(self) -> str:
        made = subprocess.run(
            [sys.executable, "manage.py", "create_api_token", "e2e", "--role", "admin", "--name", "e2e"],
            cwd=REPO,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        if made.returncode != 0:
            raise PhaseFailed("admin token", made.stdout[-2000:] + made.stderr[-2000:])
        return made.stdout.strip().split()[-1]

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)  # `chassis up` stops its parts and its engines
        try:
            self.process.wait(60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def write_checkpoint(arch: str, out_dir: Path, device: str) -> subprocess.Popen:
    """In a child process, so this process never holds a CUDA context the replica would share."""
    code = (
        "import sys; from pathlib import Path; from engine.bench.random_arch import write_random_checkpoint; "
        "write_random_checkpoint(sys.argv[1], Path(sys.argv[2]), device=sys.argv[3])"
    )
    log = out_dir.parent / "write_checkpoint.log"
    return subprocess.Popen(
        [sys.executable, "-c", code, arch, str(out_dir), device],
        cwd=REPO,
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])},
    )


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def gib(n: int | None) -> str:
    n = n or 0
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**20:.1f} MiB"


def replica_transitions(api: httpx.Client, replica_id: int) -> str:
    """``pending -> scheduled +0.4s -> launching +0.1s -> ready +61.2s``, from the replica's events."""
    from datetime import datetime

    events = api.get("/replica-events/", params={"replica": replica_id, "limit": 100}).json()["results"]
    events.sort(key=lambda e: (e["at"], e["id"]))
    parts, previous = [], None
    for event in events:
        at = datetime.fromisoformat(event["at"].replace("Z", "+00:00"))
        step = "" if previous is None else f" +{(at - previous).total_seconds():.1f}s"
        parts.append(f"{event['to_state']}{step}")
        previous = at
    return " -> ".join(parts)


def run(args: argparse.Namespace, result: dict) -> None:
    vendor = "nvidia" if args.device == "cuda" else "cpu"
    arch = "tiny-llama" if args.tiny else "llama-3.1-8b"
    var_dir = Path(args.work_dir) / "var"
    model_dir = Path(args.work_dir) / "models" / arch
    for previous in (var_dir, model_dir.parent):  # a previous run's; nothing else in --work-dir
        shutil.rmtree(previous, ignore_errors=True)
    model_dir.parent.mkdir(parents=True)
    platform = Platform(var_dir, args.port or free_port(), args.gateway_port or free_port())
    result.update(device=args.device, arch=arch, phases={})
    phases = result["phases"]

    def done(phase: str, started: float) -> float:
        phases[phase] = round(time.monotonic() - started, 2)
        return phases[phase]

    say(f"platform: `chassis up` on embedded defaults in {var_dir} (node {NODE}); "
        f"checkpoint: random {arch} drawn on {args.device} into {model_dir}")  # fmt: skip
    started = time.monotonic()
    platform.start()
    writer = write_checkpoint(arch, model_dir, args.device)
    try:
        wait_for("control plane up", platform.ready, args.up_timeout, platform.up_log)
        say(f"control plane up: web, worker, beat, agent, gateway ({done('control_plane_up', started):.1f}s)")
        token = platform.admin_token()
        api = httpx.Client(base_url=platform.api, headers={"Authorization": f"Bearer {token}"}, timeout=30)

        started = time.monotonic()
        agent_log = platform.log_dir / "agent.log"

        def node():
            platform.check_alive("node registered")
            found = api.get("/nodes/", params={"name": NODE}).json()["results"]
            found = [n for n in found if n["name"] == NODE and n["state"] == "up"]
            return found[0] if found else None

        registered = wait_for("node registered", node, args.phase_timeout, agent_log)
        accelerators = registered["accelerators"]
        gpus = [a for a in accelerators if a["vendor"] == "nvidia"]
        result["accelerators"] = accelerators
        result["runtimes"] = registered["runtimes"]
        if gpus:
            for gpu in gpus:
                say(f"GPU registered (NVML probe): nvidia:{gpu['index']} {gpu['model']}, "
                    f"{gib(gpu['memory_bytes'])}, health {gpu['health']}")  # fmt: skip
        else:
            say("GPU probe (NVML) found no NVIDIA GPU; the node registered "
                + ", ".join(f"{a['vendor']}:{a['index']} {a['model']} ({gib(a['memory_bytes'])})" for a in accelerators))  # fmt: skip
        say(f"node {NODE} up, runtimes {registered['runtimes']} ({done('node_registered', started):.1f}s)")
        if vendor == "nvidia" and (not gpus or "cuda" not in registered["runtimes"]):
            raise PhaseFailed(
                "GPU registered", "the agent reported no NVIDIA GPU or no cuda runtime", agent_log
            )

        started = time.monotonic()
        checkpoint_log = model_dir.parent / "write_checkpoint.log"
        wait_for(
            "checkpoint written", lambda: writer.poll() is not None, args.checkpoint_timeout, checkpoint_log
        )
        if writer.returncode != 0:
            raise PhaseFailed("checkpoint written", f"writer exited with {writer.returncode}", checkpoint_log)
        size = sum(f.stat().st_size for f in model_dir.glob("*.safetensors"))
        phases["checkpoint_written_total"] = round(time.monotonic() - T0, 2)
        say(f"checkpoint written: {model_dir} ({gib(size)} of safetensors; "
            f"done {phases['checkpoint_written_total']:.1f}s after start, alongside the platform)")  # fmt: skip

        response = api.post("/checkpoints/", json={"name": arch.replace(".", "-"), "path": str(model_dir)})
        if response.status_code != 201:
            raise PhaseFailed("checkpoint registered", response.text[:2000])
        checkpoint_id = response.json()["id"]

        def validated():
            row = api.get(f"/checkpoints/{checkpoint_id}/").json()
            if row["state"] == "invalid":
                raise PhaseFailed("checkpoint validated", row["reason"], platform.log_dir / "worker.log")
            return row if row["state"] == "ready" else None

        checkpoint = wait_for(
            "checkpoint validated", validated, args.phase_timeout, platform.log_dir / "worker.log"
        )
        result["parameters"] = checkpoint["parameter_count"]
        say(f"checkpoint validated: {checkpoint['architecture']}, {checkpoint['parameter_count'] / 1e9:.2f} B "
            f"parameters, {checkpoint['dtype']} ({done('checkpoint_validated', started):.1f}s)")  # fmt: skip

        started = time.monotonic()
        response = api.post(
            "/deployments/",
            json={
                "name": DEPLOYMENT, "served_model_name": DEPLOYMENT, "checkpoint": checkpoint_id,
                "replicas": 1, "vendor": vendor, "engine_options": {},
            },
        )  # fmt: skip
        if response.status_code != 201:
            raise PhaseFailed("deployment created", response.text[:2000])
        deployment_id = response.json()["id"]
        replica_log: list[Path] = []

        def replica_ready():
            platform.check_alive("replica ready")
            rows = api.get("/replicas/", params={"deployment": deployment_id}).json()["results"]
            for row in rows:
                replica_log[:] = sorted((var_dir / "replicas").glob(f"{DEPLOYMENT}-{row['uid']}.log"))
                if row["state"] == "failed":
                    raise PhaseFailed(
                        "replica ready", f"replica failed: {row['reason']}", (replica_log or [agent_log])[0]
                    )
                if row["state"] == "ready":
                    return row
            deployment = api.get(f"/deployments/{deployment_id}/").json()
            if deployment["placement_status"] == "unschedulable":
                raise PhaseFailed("replica ready", f"placement: {deployment['placement_reason']}", agent_log)
            return None

        try:
            replica = wait_for("replica ready", replica_ready, args.replica_timeout, agent_log, poll=0.5)
        except PhaseFailed as failed:  # the engine's own log says most about a replica that did not come up
            failed.log = replica_log[0] if replica_log else failed.log
            raise
        held = [f"{a['vendor']}:{a['index']}" for a in accelerators if a["id"] in replica["accelerators"]]
        result["replica"] = {
            "url": replica["url"],
            "node": replica["node_name"],
            "holds": held,
            "pid": replica["pid"],
        }
        say(f"replica ready: {replica['url']} on {replica['node_name']} holding {', '.join(held)}, "
            f"pid {replica['pid']} ({done('replica_ready', started):.1f}s from the deployment's creation)")  # fmt: skip

        say(f"replica states: {replica_transitions(api, replica['id'])}")
        started = time.monotonic()

        def routed():
            platform.check_alive("gateway routes")
            try:
                models = httpx.get(f"{platform.gateway}/v1/models", timeout=5).json()
            except (httpx.HTTPError, ValueError):
                return None
            return any(m.get("id") == DEPLOYMENT for m in models.get("data", []))

        wait_for("gateway routes", routed, args.phase_timeout, platform.log_dir / "gateway.log", poll=0.5)
        say(f"gateway lists {DEPLOYMENT} ({done('gateway_routes', started):.1f}s)")

        body = {
            "model": DEPLOYMENT, "messages": [{"role": "user", "content": PROMPT}], "stream": True,
            "max_tokens": args.max_tokens, "ignore_eos": True, "temperature": 0,
            "stream_options": {"include_usage": True},
        }  # fmt: skip
        timer = StreamTimer()  # TTFT counts from before the request is sent
        with httpx.stream(
            "POST", f"{platform.gateway}/v1/chat/completions", json=body, timeout=120
        ) as stream:
            if stream.status_code != 200:
                raise PhaseFailed("streamed request", f"HTTP {stream.status_code}: {stream.read()[:2000]!r}",
                                  platform.log_dir / "gateway.log")  # fmt: skip
            record = time_stream(stream.iter_lines(), timer)
        if record.error or not record.done or record.ttft_s is None:
            raise PhaseFailed("streamed request", f"error {record.error}, done {record.done}, "
                              f"{record.content_chunks} content chunks", platform.log_dir / "gateway.log")  # fmt: skip
        decode_s = (record.e2e_s or 0) - record.ttft_s
        tokens = record.output_tokens
        result["request"] = {
            "ttft_s": round(record.ttft_s, 4), "e2e_s": round(record.e2e_s, 4), "prompt_tokens": record.prompt_tokens,
            "output_tokens": tokens, "content_chunks": record.content_chunks, "finish_reason": record.finish_reason,
            "decode_tok_s": round((tokens - 1) / decode_s, 1) if decode_s > 0 and tokens > 1 else None,
            "text": record.text,
        }  # fmt: skip
        say(f"first streamed chunk through the gateway: TTFT {record.ttft_s * 1000:.1f} ms")
        say(f"streamed answer: {tokens} tokens ({record.prompt_tokens} prompt tokens) in {record.e2e_s:.3f}s, "
            f"{result['request']['decode_tok_s']} tok/s after the first, finish {record.finish_reason}")  # fmt: skip
        say(f"streamed text: {record.text!r}")
        result["ok"] = True
    finally:
        if writer.poll() is None:
            writer.kill()
        started = time.monotonic()
        platform.stop()
        phases["teardown"] = round(time.monotonic() - started, 2)
        phases["total"] = round(time.monotonic() - T0, 2)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                        help="deployment vendor nvidia (cuda) or cpu; also where weights are drawn (default: %(default)s)")  # fmt: skip
    parser.add_argument("--tiny", action="store_true", help="the tiny-llama shape instead of Llama-3.1-8B's")
    parser.add_argument("--work-dir", default="/tmp/chassis-e2e",
                        help="state, logs and the checkpoint; emptied first (default: %(default)s)")  # fmt: skip
    parser.add_argument("--port", type=int, default=0, help="control plane port (default: a free one)")
    parser.add_argument("--gateway-port", type=int, default=0, help="gateway port (default: a free one)")
    parser.add_argument("--max-tokens", type=int, default=128, help="tokens streamed (default: %(default)s)")
    parser.add_argument(
        "--up-timeout", type=float, default=150, help="seconds for `chassis up` (default: %(default)s)"
    )
    parser.add_argument("--checkpoint-timeout", type=float, default=240,
                        help="seconds for the checkpoint to be written (default: %(default)s)")  # fmt: skip
    parser.add_argument("--replica-timeout", type=float, default=300,
                        help="seconds from the deployment to a ready replica (default: %(default)s)")  # fmt: skip
    parser.add_argument("--phase-timeout", type=float, default=90,
                        help="seconds for each other phase (default: %(default)s)")  # fmt: skip
    parser.add_argument("--budget", type=float, default=480,
                        help="seconds for everything; every wait ends by then (default: %(default)s)")  # fmt: skip
    parser.add_argument("--json", default=None, help="also write the results here")
    args = parser.parse_args()
    BUDGET_END[0] = T0 + args.budget
    result: dict = {"ok": False}
    try:
        run(args, result)
        code = 0
    except PhaseFailed as failed:
        result.update(failed_phase=failed.phase, why=failed.why)
        print(f"[e2e] FAILED in phase '{failed.phase}': {failed.why}", file=sys.stderr, flush=True)
        if failed.log is not None:
            print(f"[e2e] tail of {failed.log}:\n{tail(failed.log)}", file=sys.stderr, flush=True)
        code = 1
    say(f"timings (s): {json.dumps(result.get('phases', {}))}")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    say("PASSED" if code == 0 else "FAILED")
    return code


if __name__ == "__main__":
    sys.exit(main())
