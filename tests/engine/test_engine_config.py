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
