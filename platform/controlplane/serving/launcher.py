"""Engine processes on this node: command line, start, find, probe, stop. No database here."""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import time
import typing
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx
import psutil

from controlplane.fleet.choices import ENGINE_DEVICE, VISIBLE_DEVICES_ENV, Vendor
from engine.config import EngineConfig
from engine.config_cli import add_engine_arguments, field_of, option_errors, option_flags

REPO_DIR = Path(__file__).resolve().parents[3]
FIRST_REPLICA_PORT = 8100
_children: dict[int, subprocess.Popen] = {}  # processes this agent started, reaped by reap_children()
_exit_codes: dict[int, int] = {}  # pid -> exit code of reaped children (negative: killed by that signal)
# Engine settings build_command takes from the deployment itself, so its engine options may not set them.
SET_BY_DEPLOYMENT = {
    "model_dir": "checkpoint",
    "device": "vendor",
    "tensor_parallel_size": "tp_size",
    "expert_parallel_size": "ep_size",
    "data_parallel_size": "dp_size",
    "kv_role": "role",
}
SIZE_FIELDS = ("tensor_parallel_size", "expert_parallel_size", "data_parallel_size")


@dataclass(frozen=True)
class EngineProcess:
    pid: int
    port: int | None


def engine_flags(options: dict) -> list[str]:
    """{"max_num_seqs": 8, "enforce_eager": true} -> ["--max-num-seqs", "8", "--enforce-eager"]
    (``engine/config_cli.py``: the flags ``chassis serve`` generates from EngineConfig)."""
    return option_flags(options)


def engine_option_errors(options: object) -> list[str]:
    """Why ``chassis serve`` would refuse these engine options, one message per refused option, each
    starting with its name (or one message when they are not a JSON object); empty when they are all
    fine. Checked with the engine's own parser, so a deployment fails here instead of at launch."""
    if not isinstance(options, dict):
        return ["must be a JSON object of `chassis serve` engine options"]
    errors = option_errors(options)
    for key in options:
        owner = SET_BY_DEPLOYMENT.get(field_of(key) or key)
        if owner is not None:
            errors[key] = f"set from the deployment's {owner}, not an engine option"
    return [f"{key}: {message}" for key, message in errors.items()]


def checked_engine_options(options: object, error: type[Exception]) -> dict:
    """``options`` if ``chassis serve`` takes them, else ``error`` (a form's or a serializer's
    ValidationError) with every reason."""
    errors = engine_option_errors(options)
    if errors:
        raise error(errors)
    return options


class _OptionParser(argparse.ArgumentParser):
    def error(self, message: str) -> typing.NoReturn:
        raise ValueError(message)


def size_errors(
    options: object, *, tp_size: int, ep_size: int = 1, dp_size: int = 1, role: str = "mixed"
) -> dict[str, str]:
    """Deployment field (``tp_size``, ``ep_size`` or ``dp_size``) -> why ``chassis serve`` would refuse
    a replica of these sizes with these engine options and role. EngineConfig itself is asked (ep_size
    equals dp_size and is above 1 only with tp_size 1, without speculative decoding, KV tiers or
    batch invariance, ...), so those rules live in engine/config.py only. Empty when it would start,
    and when the options are refused one by one anyway (``engine_option_errors``) or the reason
    names none of the sizes (the launch says it then)."""
    sizes = dict(zip(SIZE_FIELDS, (tp_size, ep_size, dp_size), strict=True))
    if not all(isinstance(size, int) and size >= 1 for size in sizes.values()):
        return {}  # the field's own validation says so
    if not isinstance(options, dict) or engine_option_errors(options):
        return {}
    message = _refusal(options, sizes, role)
    named = sorted((message.find(name), name) for name in SIZE_FIELDS if name in message)
    if not named:
        return {}
    if role != "mixed" and not _refusal(options, sizes, "mixed"):
        message += f"; a {role} replica moves its KV through the KV tiers"
    for name in SIZE_FIELDS:
        message = message.replace(name, SET_BY_DEPLOYMENT[name])
    return {SET_BY_DEPLOYMENT[named[0][1]]: message}


def _refusal(options: dict, sizes: dict[str, int], role: str) -> str:
    """Why EngineConfig refuses these options, sizes and role; empty when it takes them."""
    parser = _OptionParser(add_help=False)
    add_engine_arguments(parser, model_dir=False, defaults=False)
    try:
        given = vars(parser.parse_args(option_flags(_role_options(options, role, "kv-shared"))))
        EngineConfig(model_dir=".", **{**given, **sizes})
    except ValueError as exc:
        return str(exc)
    return ""


def _role_options(options: dict, role: str, shared_kv_dir: str | None) -> dict:
    """A prefill or decode replica's engine options: its kv_role, and the KV directory it shares with
    the other role's replicas (``shared_kv_dir``, unless the options name one)."""
    options = dict(options)
    if role != "mixed":
        options["kv_role"] = role
        if not options.get("kv_shared_cache_dir"):
            if not shared_kv_dir:
                raise ValueError(f"a {role} replica needs a shared KV directory")
            options["kv_shared_cache_dir"] = shared_kv_dir
    return options


def build_command(
    *,
    model_dir: str,
    host: str,
    port: int,
    vendor: str,
    served_model_name: str,
    replica_id: str,
    options: dict,
    tp_size: int = 1,
    ep_size: int = 1,
    dp_size: int = 1,
    role: str = "mixed",
    shared_kv_dir: str | None = None,
) -> list[str]:
    """``tp_size`` × ``ep_size``: the ranks (accelerators) of the replica, ``ep_size`` of them with a
    share of the routed experts and attention data parallel (``dp_size``, equal); the one engine
    process starts a process per rank on the devices ``engine_env`` makes visible. ``role`` prefill
    or decode (prefill/decode disaggregation): the engine's kv_role, and the KV directory it shares
    with the other role's replicas (``shared_kv_dir``, unless the options name one)."""
    options = _role_options(options, role, shared_kv_dir)
    dtype = options.pop("dtype", "float32" if vendor == Vendor.CPU else "bfloat16")
    return [
        sys.executable, "-m", "chassis", "serve", model_dir,
        "--host", host, "--port", str(port),
        "--device", ENGINE_DEVICE[vendor], "--dtype", str(dtype),
        "--served-model-name", served_model_name,
        "--replica-id", replica_id,
        "--tp", str(tp_size), "--ep", str(ep_size), "--dp", str(dp_size),
        *engine_flags(options),
    ]  # fmt: skip


def engine_env(vendor: str, device_indices: Sequence[int], base: dict | None = None) -> dict[str, str]:
    env = dict(os.environ if base is None else base)
    if vendor in VISIBLE_DEVICES_ENV:
        env[VISIBLE_DEVICES_ENV[vendor]] = ",".join(str(index) for index in device_indices)
    else:
        env["CUDA_VISIBLE_DEVICES"] = ""  # a CPU replica must not grab a GPU by accident
    return env


def port_is_free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def free_port(host: str, taken: Iterable[int], first: int = FIRST_REPLICA_PORT) -> int:
    taken = set(taken)
    for port in range(first, 65535):
        if port not in taken and port_is_free(host, port):
            return port
    raise RuntimeError(f"no free port from {first} up on {host}")


def start_engine(command: list[str], env: dict[str, str], log_path: Path) -> int:
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        log.write(f"\n--- {time.strftime('%Y-%m-%d %H:%M:%S')} {' '.join(command)}\n".encode())
        log.flush()
        # A new session: the engine outlives the agent and its signals; it is found again by --replica-id.
        process = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            env=env, cwd=REPO_DIR, start_new_session=True, close_fds=True,
        )  # fmt: skip
    _children[process.pid] = process
    return process.pid


def reap_children() -> None:
    for pid, process in list(_children.items()):
        if process.poll() is not None:
            _exit_codes[pid] = process.returncode
            _children.pop(pid, None)


def exit_code(pid: int, wait: float = 1.0) -> int | None:
    """Known only for engines this agent process started. A killed process loses its command line
    a moment before it can be reaped, so wait briefly for it."""
    process = _children.get(pid)
    if process is not None:
        try:
            process.wait(wait)
        except subprocess.TimeoutExpired:
            return None
    reap_children()
    return _exit_codes.get(pid)


def _port_from(cmdline: list[str]) -> int | None:
    if "--port" in cmdline[:-1]:
        value = cmdline[cmdline.index("--port") + 1]
        return int(value) if value.isdigit() else None
    return None


def _is_engine_for(process: psutil.Process, replica_id: str) -> bool:
    try:
        cmdline = process.cmdline()
        alive = process.status() != psutil.STATUS_ZOMBIE
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return False
    return alive and "--replica-id" in cmdline and replica_id in cmdline


def find_engine(replica_id: str, pid: int | None = None) -> EngineProcess | None:
    """The live engine process started for ``replica_id`` (pid checked first, then a scan)."""
    reap_children()
    candidates = []
    if pid:
        try:
            candidates.append(psutil.Process(pid))
        except psutil.NoSuchProcess:
            pass
    for process in candidates or psutil.process_iter():
        if _is_engine_for(process, replica_id):
            return EngineProcess(process.pid, _port_from(process.cmdline()))
    if candidates:
        return find_engine(replica_id)
    return None


def running_engines() -> dict[str, EngineProcess]:
    """replica id -> process, for every engine process on this machine."""
    found = {}
    for process in psutil.process_iter():
        try:
            cmdline = process.cmdline()
            if "--replica-id" in cmdline[:-1] and process.status() != psutil.STATUS_ZOMBIE:
                found[cmdline[cmdline.index("--replica-id") + 1]] = EngineProcess(
                    process.pid, _port_from(cmdline)
                )
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


def is_healthy(url: str, timeout: float = 2.0) -> bool:
    try:
        return httpx.get(f"{url}/health", timeout=timeout).status_code == 200
    except httpx.HTTPError:
        return False


def stop_process(pid: int, term_timeout: float) -> str:
    """SIGTERM the engine's process group, SIGKILL it after ``term_timeout``; says which it took."""
    try:
        process = psutil.Process(pid)
    except psutil.NoSuchProcess:
        return "already gone"
    try:
        os.killpg(pid, signal.SIGTERM)
    except (ProcessLookupError, PermissionError):
        process.terminate()
    try:
        process.wait(term_timeout)
        outcome = "exited after SIGTERM"
    except psutil.TimeoutExpired:
        try:
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            process.kill()
        process.wait(5)
        outcome = f"killed after {term_timeout:g}s without exiting on SIGTERM"
    except psutil.NoSuchProcess:
        outcome = "exited after SIGTERM"
    reap_children()
    return outcome


def log_tail(path: str | Path, lines: int = 40) -> str:
    try:
        with open(path, "rb") as log:
            log.seek(0, os.SEEK_END)
            log.seek(max(log.tell() - 64 * 1024, 0))
            return "\n".join(log.read().decode("utf-8", "replace").splitlines()[-lines:])
    except OSError:
        return ""


def launch_output_tail(path: str | Path, lines: int = 15) -> str:
    """The log's last lines written since the newest launch header (``start_engine`` writes one per
    launch), so a failure's reason holds this launch's output only."""
    tail = log_tail(path, 200).splitlines()
    starts = [i for i, line in enumerate(tail) if line.startswith("--- ")]
    return "\n".join(tail[starts[-1] + 1 :][-lines:] if starts else tail[-lines:])
