import subprocess
import sys
import uuid

from controlplane.serving import launcher


def test_engine_flags_and_command():
    assert launcher.engine_flags({"max_num_seqs": 8, "enforce_eager": True, "x": False}) == [
        "--max-num-seqs", "8", "--enforce-eager",
    ]  # fmt: skip
    command = launcher.build_command(
        model_dir="/m", host="127.0.0.1", port=8100, vendor="nvidia", served_model_name="chat",
        replica_id="r1", options={"dtype": "float16", "max_num_seqs": 4},
    )  # fmt: skip
    assert command[1:5] == ["-m", "chassis", "serve", "/m"]
    assert (
        command[command.index("--device") + 1] == "cuda"
        and command[command.index("--dtype") + 1] == "float16"
    )
    assert command[-2:] == ["--max-num-seqs", "4"]


def test_tensor_parallel_replica_gets_tp_flag_and_its_devices():
    command = launcher.build_command(
        model_dir="/m", host="127.0.0.1", port=8100, vendor="nvidia", served_model_name="chat",
        replica_id="r1", options={}, tp_size=2,
    )  # fmt: skip
    assert command[command.index("--tp") + 1] == "2"
    assert launcher.engine_env("nvidia", [4, 5], base={})["CUDA_VISIBLE_DEVICES"] == "4,5"


def test_expert_parallel_replica_gets_ep_and_dp_flags_and_all_its_devices():
    from chassis.main import build_parser
    from engine.config_cli import config_from_args

    command = launcher.build_command(
        model_dir="/m", host="127.0.0.1", port=8100, vendor="nvidia", served_model_name="chat",
        replica_id="r1", options={"max_num_seqs": 4}, ep_size=2, dp_size=2,
    )  # fmt: skip
    flags = " ".join(command)
    assert "--tp 1 --ep 2 --dp 2" in flags
    config = config_from_args(build_parser().parse_args(command[3:]))  # what the engine will run with
    assert (config.expert_parallel_size, config.data_parallel_size, config.world_size) == (2, 2, 2)
    assert launcher.engine_env("nvidia", [6, 7], base={})["CUDA_VISIBLE_DEVICES"] == "6,7"
    assert launcher.engine_env("ascend", [0, 1], base={})["ASCEND_RT_VISIBLE_DEVICES"] == "0,1"


def test_visible_devices_per_vendor():
    assert launcher.engine_env("nvidia", [2, 3], base={})["CUDA_VISIBLE_DEVICES"] == "2,3"
    assert launcher.engine_env("ascend", [0], base={})["ASCEND_RT_VISIBLE_DEVICES"] == "0"
    assert launcher.engine_env("cpu", [0], base={}) == {"CUDA_VISIBLE_DEVICES": ""}


def test_free_port_skips_taken_and_bound_ports():
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        first = busy.getsockname()[1]
        port = launcher.free_port("127.0.0.1", taken={first + 1}, first=first)
    assert port not in (first, first + 1)


def test_find_and_stop_a_real_process_by_replica_id(tmp_path):
    replica_id = str(uuid.uuid4())
    # A real child process carrying the engine's identifying flags (python ignores the extra argv).
    pid = launcher.start_engine(
        [sys.executable, "-c", "import time; time.sleep(60)", "--port", "8199", "--replica-id", replica_id],
        env={}, log_path=tmp_path / "r.log",
    )  # fmt: skip
    found = launcher.find_engine(replica_id)
    assert found == launcher.EngineProcess(pid, 8199)
    assert launcher.running_engines()[replica_id].pid == pid
    assert launcher.find_engine(replica_id, pid=1) == found  # a wrong pid falls back to the scan
    assert launcher.stop_process(pid, term_timeout=5) == "exited after SIGTERM"
    assert launcher.find_engine(replica_id) is None
    assert "--replica-id" in (tmp_path / "r.log").read_text()


def test_sigkill_after_timeout_when_sigterm_is_ignored(tmp_path):
    replica_id = str(uuid.uuid4())
    code = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('handler ' + 'installed', flush=True); time.sleep(60)"
    pid = launcher.start_engine(
        [sys.executable, "-c", code, "--replica-id", replica_id], {}, tmp_path / "r.log"
    )
    for _ in range(100):  # wait until the handler is installed
        if "handler installed" in (tmp_path / "r.log").read_text():
            break
        subprocess.run(["sleep", "0.05"])
    assert launcher.stop_process(pid, term_timeout=0.5).startswith("killed after 0.5s")
    assert launcher.find_engine(replica_id) is None


def test_launch_output_tail_holds_the_newest_launch_only(tmp_path):
    log = tmp_path / "replica.log"
    log.write_text(
        "\n--- 2026-01-01 10:00:00 chassis serve\nold error\n\n--- 2026-01-01 10:01:00 chassis serve\nnew 1\nnew 2\n"
    )
    assert launcher.launch_output_tail(log) == "new 1\nnew 2"
    assert launcher.launch_output_tail(log, 1) == "new 2"
    assert launcher.launch_output_tail(tmp_path / "missing.log") == ""
