"""Issue 23's scaling model (engine/bench/ep_scaling.py): the projection's arithmetic on made-up
component tables, no device. Only directions and bounds are asserted, never a measured value."""

import json
from dataclasses import asdict, replace

import pytest

from engine.bench.ep_scaling import (
    DEEPSEEK_V3,
    PUBLISHED_PER_GPU,
    Assumptions,
    Components,
    batch_that_fits,
    collective_ms,
    comm_bytes,
    format_table,
    interpolate,
    main,
    project,
    step_times,
    weight_gb,
)

BATCHES = [32, 64, 128, 256, 512, 1024]
EPS = [8, 32, 64]


def components(shape=DEEPSEEK_V3, context=4096) -> dict:
    """Roofline-shaped stand-ins (4 TB/s, 600 TFLOP/s): a weight read or the FLOPs, whichever is longer."""

    def gemm(params: int, rows: int) -> float:
        return max(params * 2 / 4e9, 2 * params * rows / 600e9)

    s = shape
    expert = s.expert_params()
    tables = {
        "mla_attention": [{"batch": b, "ms": b * context * s.latent_width * 2 / 4e9 + 0.01} for b in BATCHES],
        "attention_projections": [{"batch": b, "ms": gemm(170_000_000, b)} for b in BATCHES],
        "layer_other": [{"batch": b, "ms": 0.02} for b in BATCHES],
        "shared_expert": [{"batch": b, "ms": gemm(expert, b)} for b in BATCHES],
        "dense_mlp": [{"batch": b, "ms": gemm(3 * s.hidden * s.dense_intermediate, b)} for b in BATCHES],
        "lm_head": [{"batch": b, "ms": gemm(s.vocab * s.hidden, b)} for b in BATCHES],
        "routed_experts": [
            {
                "ep": ep,
                "local_experts": 256 // ep,
                "pairs": p,
                "ms": max(256 // ep * gemm(expert, 1), gemm(expert, p)),
            }
            for ep in EPS
            for p in [b * s.top_k for b in BATCHES] + [2 * BATCHES[-1] * s.top_k]
        ],
    }
    return {"device": "made up", "shape": asdict(s), "context": context, "tables": tables}


def test_deepseek_v3_shape_has_its_published_size():
    linear, embedding = DEEPSEEK_V3.replicated_params()
    assert abs(linear + embedding + DEEPSEEK_V3.routed_params() - 671e9) < 0.5e9  # "671B total"
    assert DEEPSEEK_V3.kv_bytes_per_token() == 61 * 576 * 2  # ~70 KB per token in bf16


def test_bf16_experts_do_not_fit_one_node_but_fp8_ones_do():
    bf16, fp8 = Assumptions(), Assumptions(weight_bytes=1.0)
    assert weight_gb(DEEPSEEK_V3, 8, bf16) > 141  # the engine dequantizes FP8 checkpoints to bf16
    assert batch_that_fits(DEEPSEEK_V3, 8, 4096, bf16, 141) == 0
    assert batch_that_fits(DEEPSEEK_V3, 8, 4096, fp8, 141) > 0
    fits = [batch_that_fits(DEEPSEEK_V3, ep, 4096, bf16, 141) for ep in EPS]
    assert fits == sorted(fits)  # fewer experts per GPU leave more memory for KV


def test_ep8_stays_on_nvlink_and_ep32_crosses_nodes():
    a = Assumptions()
    ep8, ep32 = comm_bytes(DEEPSEEK_V3, 8, 1024, a), comm_bytes(DEEPSEEK_V3, 32, 1024, a)
    assert ep8.dispatch_rdma == ep8.combine_rdma == 0 and ep8.dispatch_nvlink > 0
    assert ep32.dispatch_rdma > 0 and ep32.dispatch_rdma / ep32.dispatch_nvlink == pytest.approx(24 / 7)
    # FP8 values plus one fp32 scale per 128 out, BF16 back: DeepEP's 7,392 and 14,336 bytes per pair.
    assert (ep8.dispatch_nvlink, ep8.combine_nvlink) == pytest.approx(
        (1024 * 7 / 8 * 7392, 1024 * 7 / 8 * 14336)
    )
    c = Components(components())
    assert step_times(c, 8, 128, 4096, a).comm_ms < step_times(c, 32, 128, 4096, a).comm_ms


def test_the_link_model_is_near_deepeps_low_latency_figures():
    # DeepEP's low-latency kernels on H800 + CX7 at EP64, 128 tokens x top-8: dispatch 173 us,
    # combine 314 us (docs/legacy.md). Pure RDMA there: every pair but the rank's own.
    a = Assumptions()
    pairs = 128 * 8 * 63 / 64
    dispatch = collective_ms(0, pairs * 7392, a) * 1e3
    combine = collective_ms(0, pairs * 14336, a) * 1e3
    assert dispatch == pytest.approx(173, rel=0.25) and combine == pytest.approx(314, rel=0.25)


@pytest.mark.parametrize("ep", EPS)
@pytest.mark.parametrize("batch", [32, 100, 256, 700])
def test_more_bandwidth_never_slows_a_step(ep, batch):
    c, a = Components(components()), Assumptions()
    previous = step_times(c, ep, batch, 4096, a)
    for factor in (1.5, 2, 4, 100):
        faster = replace(a, nvlink_gb_s=a.nvlink_gb_s * factor, rdma_gb_s=a.rdma_gb_s * factor)
        t = step_times(c, ep, batch, 4096, faster)
        assert t.comm_ms <= previous.comm_ms
        assert t.serial_ms <= previous.serial_ms and t.overlapped_ms <= previous.overlapped_ms
        previous = t
    only_rdma = step_times(c, ep, batch, 4096, replace(a, rdma_gb_s=400))
    assert only_rdma.overlapped_ms <= step_times(c, ep, batch, 4096, a).overlapped_ms


@pytest.mark.parametrize("ep", EPS)
@pytest.mark.parametrize("latency_us", [0, 15, 200])
def test_overlap_is_never_slower_than_serial_and_never_below_either_stream(ep, latency_us):
    c, a = Components(components()), Assumptions(collective_latency_us=latency_us)
    for batch in (32, 64, 300, 1024):
        t = step_times(c, ep, batch, 4096, a)
        assert t.overlapped_ms <= t.serial_ms
        assert t.overlapped_ms >= max(t.compute_ms, t.comm_ms) * 0.5  # two halves can't beat half of each


def test_imbalance_and_longer_context_cost_time():
    c = Components(components())
    base = step_times(c, 32, 128, 4096, Assumptions())
    assert step_times(c, 32, 128, 4096, Assumptions(imbalance=1.3)).serial_ms > base.serial_ms
    assert step_times(c, 32, 128, 8192, Assumptions()).compute_ms > base.compute_ms


def test_interpolation_is_linear_inside_and_flags_outside():
    points = [(10, 1.0), (20, 3.0)]
    assert interpolate(points, 15) == (2.0, False)
    assert interpolate(points, 5) == (1.0, True)  # a smaller batch is not modelled as faster
    assert interpolate(points, 30) == (5.0, True)


def test_table_lists_each_ep_and_the_published_figure():
    data = components()
    a = Assumptions()
    rows = project(data, EPS, a)
    assert [r.ep for r in rows] == EPS
    ep8, ep32, ep64 = rows
    assert ep8.batch == 0 and "no KV memory" in ep8.note  # bf16 experts at EP 8
    for r in (ep32, ep64):
        assert 2 <= r.batch <= r.batch_fit and r.tokens_per_s > 0 and r.mtp_tokens_per_s > 0
        assert r.overlapped_ms <= r.serial_ms
        assert r.tokens_per_s == pytest.approx(r.batch / r.overlapped_ms * 1e3)
    text = format_table(rows, a)
    lines = text.splitlines()
    assert lines[0].startswith("| EP | nodes |") and "tok/s/GPU with MTP (1.8 tok/step)" in lines[0]
    assert all(line.count("|") == lines[0].count("|") for line in lines[:5])
    assert f"{PUBLISHED_PER_GPU:,.0f} (14,800 per node)" in text and "144 (DeepSeek, H800)" in text
    fp8 = project(data, [8], replace(a, weight_bytes=1.0))[0]
    assert fp8.batch > 0 and fp8.comm_ms < ep32.comm_ms


def test_given_batches_beyond_memory_or_the_tables_are_flagged():
    rows = project(components(), [64], Assumptions(batches=(64, 5000)))
    assert [r.batch for r in rows] == [64, 5000]
    assert not rows[0].extrapolated and rows[1].extrapolated and "exceeds" in rows[1].note
    assert "*" in format_table(rows, Assumptions())


def test_mtp_column_can_be_dropped():
    rows = project(components(), [32], Assumptions(mtp_tokens_per_step=1.0))
    assert rows[0].mtp_tokens_per_s is None
    # Compute-bound (free links): a kernel reading each KV once for both rows makes MTP cheaper.
    free = Assumptions(nvlink_gb_s=1e9, rdma_gb_s=1e9, collective_latency_us=0)
    cheaper = project(components(), [32], replace(free, mtp_attention_factor=1.0))[0]
    assert cheaper.mtp_tokens_per_s > project(components(), [32], free)[0].mtp_tokens_per_s


def test_cli_prints_the_table_and_writes_json(tmp_path, capsys):
    path, out = tmp_path / "components.json", tmp_path / "projection.json"
    path.write_text(json.dumps(components()))
    assert (
        main(["--components", str(path), "--weights", "fp8", "--imbalance", "1.2", "--json", str(out)]) == 0
    )
    printed = capsys.readouterr().out
    assert "| 8 | 1 | 32 |" in printed and "| 64 | 8 | 4 |" in printed
    saved = json.loads(out.read_text())
    assert saved["assumptions"]["weight_bytes"] == 1.0 and saved["assumptions"]["imbalance"] == 1.2
    assert [r["ep"] for r in saved["rows"]] == EPS and saved["published"]["decode_ep"] == 144
