"""The floor figures ``chassis bench engine`` reports beside the engine's, from given ceilings."""

import pytest

from engine.bench import engine_bench
from engine.bench.floors import Ceilings, FloorInputs, active_weight_bytes
from engine.bench.random_arch import hf_config
from engine.bench.workloads import _decode_step_floor_figures
from engine.checkpoint.model_config import parse_model_config
from engine.checkpoint.model_facts import parameter_counts

CEILINGS = Ceilings(copy_bytes_per_s=4e12, matmul_flops_per_s=8e14)


@pytest.fixture
def deepseek():
    return FloorInputs(parse_model_config(hf_config("deepseek-v2-lite")), CEILINGS, "bfloat16")


def test_floor_figures_use_the_active_parameters(deepseek):
    active = parameter_counts(deepseek.cfg).active
    figures = engine_bench._floor_figures(deepseek, active, (2048,))
    assert figures["floor_decode_bs1_ms_per_token"] == pytest.approx(active_weight_bytes(deepseek.cfg) / 4e9)
    assert figures["floor_prefill_2048_tokens_per_s"] == pytest.approx(8e14 / (2 * active))
    assert figures["copy_TB_per_s"] == pytest.approx(4.0)


def test_floor_fractions_need_both_figures():
    figures = {"engine_decode_bs1_decode_tokens_per_s": 300.0, "floor_decode_bs1_tokens_per_s": 600.0}
    figures |= {"floor_prefill_2048_tokens_per_s": 1e5}  # no engine prefill measured
    engine_bench._add_floor_fractions(figures, (2048,))
    assert figures["fraction_decode_bs1_of_floor"] == pytest.approx(0.5)
    assert "fraction_prefill_2048_of_floor" not in figures


def test_batch_decode_step_is_compared_with_its_weight_and_kv_read_floor(deepseek):
    # Every expert is read at batch 128; contexts are prompt 512 + half of 128 outputs.
    figures = _decode_step_floor_figures(deepseek, 512, 128, 128, {"decode_step_ms": 20.0})
    counts = parameter_counts(deepseek.cfg)
    weights = 2 * (counts.total - counts.input_embedding)
    per_token = 27 * (512 + 64) * 2  # 27 layers of latent 512 + rope 64 in bf16
    kv = 128 * (512 + 128 // 2) * per_token
    assert figures["floor_decode_step_weight_GB"] == pytest.approx(weights / 1e9)
    assert figures["floor_decode_step_kv_GB"] == pytest.approx(kv / 1e9)
    assert figures["floor_decode_step_ms"] == pytest.approx((weights + kv) / 4e9)
    assert figures["decode_step_over_floor"] == pytest.approx(20.0 / figures["floor_decode_step_ms"])
    assert _decode_step_floor_figures(None, 512, 128, 128, {"decode_step_ms": 20.0}) == {}
