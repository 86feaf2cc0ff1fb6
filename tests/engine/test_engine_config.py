import pytest

from engine.config import EngineConfig


def test_defaults_are_valid(tmp_path):
    cfg = EngineConfig(model_dir=tmp_path)
    assert cfg.block_size == 16 and cfg.tensor_parallel_size == 1
    assert cfg.resolved_device() in ("cpu", "cuda", "npu")


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("device", "tpu", "device must be one of"),
        ("dtype", "int8", "dtype must be one of"),
        ("block_size", 0, "block_size must be a positive integer"),
        ("max_num_batched_tokens", -1, "max_num_batched_tokens"),
        ("max_num_seqs", 1.5, "max_num_seqs"),
        ("max_model_len", 0, "max_model_len"),
        ("num_gpu_blocks", 0, "num_gpu_blocks"),
        ("gpu_memory_utilization", 1.5, "gpu_memory_utilization"),
        ("tensor_parallel_size", 0, "tensor_parallel_size must be a positive integer"),
    ],
)
def test_bad_values_raise_clear_errors(tmp_path, field, value, message):
    with pytest.raises(ValueError, match=message):
        EngineConfig(model_dir=tmp_path, **{field: value})


def test_switches_take_their_environment_variable_unless_given(tmp_path, monkeypatch):
    monkeypatch.setenv("CHASSIS_KERNELS", " Torch ")
    monkeypatch.setenv("CHASSIS_GEMV_TABLE", "/Tables/H200.json")
    monkeypatch.delenv("CHASSIS_GEMV", raising=False)
    cfg = EngineConfig(model_dir=tmp_path)
    assert (cfg.kernels, cfg.gemv, cfg.gemv_table) == ("torch", "auto", "/Tables/H200.json")
    assert EngineConfig(model_dir=tmp_path, kernels="triton").kernels == "triton"  # given beats environment
    monkeypatch.setenv("CHASSIS_TP_ALL_REDUCE", "fastest")
    with pytest.raises(
        ValueError, match="CHASSIS_TP_ALL_REDUCE='fastest' is not one of auto, nccl, symmetric"
    ):
        EngineConfig(model_dir=tmp_path)


def test_switch_choices_are_the_ones_the_kernels_and_collectives_accept():
    from engine.distributed import symmetric_all_reduce
    from engine.layers import linear
    from kernels import _common

    choices = EngineConfig.choices()
    assert set(choices["kernels"]) == set(_common.MODES)
    assert set(choices["gemv"]) == set(linear.GEMV_MODES)
    assert set(choices["tp_all_reduce"]) == set(symmetric_all_reduce.MODES)
    assert set(choices["launch_overlap"]) == set(_common.LAUNCH_OVERLAP_MODES)


def test_bad_switch_and_flag_values(tmp_path):
    with pytest.raises(ValueError, match="gemv must be one of auto, cublas, triton, got 'cutlass'"):
        EngineConfig(model_dir=tmp_path, gemv="cutlass")
    with pytest.raises(ValueError, match="enforce_eager must be true or false"):
        EngineConfig(model_dir=tmp_path, enforce_eager="yes")


def test_llm_takes_the_engine_config_defaults(tiny_qwen3):
    """LLM(model_dir, **overrides): no defaults of its own. dtype auto is the checkpoint's (the tiny
    test checkpoints are float32), and the engine applies its switches to this process."""
    import dataclasses
    import inspect

    import torch

    from engine import LLM
    from engine.layers import linear
    from engine.switches import Switches, current
    from kernels import _common

    assert list(inspect.signature(LLM.__init__).parameters) == ["self", "model_dir", "overrides"]
    llm = LLM(tiny_qwen3, kernels="torch", gemv="cublas")
    expected = dataclasses.replace(EngineConfig(tiny_qwen3), kernels="torch", gemv="cublas")
    assert llm.config == expected
    assert llm.engine.dtype == torch.float32
    assert _common.kernels_mode() == "torch" and linear.gemv_mode() == "cublas"
    assert current() == Switches.of(llm.config)


def test_scripts_without_an_engine_take_the_switches_from_the_environment(monkeypatch):
    from engine.switches import Switches

    for variable in ("CHASSIS_KERNELS", "CHASSIS_GEMV_TABLE", "CHASSIS_TP_ALL_REDUCE"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("CHASSIS_GEMV", "cublas")
    assert Switches.from_environment() == Switches(gemv="cublas")


def test_the_mla_split_floor_is_a_count_of_keys_the_switches_carry(tmp_path):
    from engine.switches import Switches, current
    from kernels import mla_decode

    config = EngineConfig(model_dir=tmp_path, mla_split_floor=256)
    assert Switches.of(config).mla_split_floor == 256
    before = current()
    try:
        Switches.of(config).apply()
        assert mla_decode.default_tiles(1).split_floor == 256 and current().mla_split_floor == 256
    finally:
        before.apply()
    assert mla_decode.split_floor() == before.mla_split_floor
    for bad in (-1, 1.5, True):
        with pytest.raises(ValueError, match="mla_split_floor must be 0 or more"):
            EngineConfig(model_dir=tmp_path, mla_split_floor=bad)


def test_batch_invariant_is_a_flag_off_by_default_and_single_rank(tmp_path):
    from engine.config_cli import option_errors, option_flags

    assert EngineConfig(model_dir=tmp_path).batch_invariant is False
    with pytest.raises(ValueError, match="batch_invariant must be true or false"):
        EngineConfig(model_dir=tmp_path, batch_invariant="yes")
    with pytest.raises(ValueError, match="batch_invariant works with tensor_parallel_size 1 only"):
        EngineConfig(model_dir=tmp_path, batch_invariant=True, tensor_parallel_size=2)
    assert option_flags({"batch_invariant": True}) == ["--batch-invariant"]
    assert option_errors({"batch_invariant": True}) == {}
    assert option_errors({"batch_invariant": "on"}) == {"batch_invariant": "must be true or false"}
