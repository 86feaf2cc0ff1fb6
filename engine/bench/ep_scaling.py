"""``chassis bench ep-scaling``: projected decode tokens/s per GPU of a DeepSeek-class MoE model under
expert parallelism (EP) with data-parallel (DP) attention, from one device's measured step components.

Pure arithmetic, no torch: it reads the JSON that ``engine.bench.ep_components`` wrote on one GPU
(per-layer times of MLA attention, the dense projections, the shared expert, the dense MLP, the LM
head, and the routed experts' grouped GEMM at 256/EP local experts) and adds the all-to-all traffic
of the dispatch and combine, priced by the link it crosses (NVLink inside a node, RDMA across). Per EP
size: the batch per rank that the KV memory left after the weights allows, the step time with and
without two-micro-batch overlap, tokens/s per GPU, and a separate column with MTP speculation. Method,
sources and every assumption: ``docs/ep-scaling-model.md``.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import asdict, dataclass, field

GB = 1e9

# DeepSeek, "Day 6: One More Thing, DeepSeek-V3/R1 Inference System Overview" (1 March 2025).
PUBLISHED = {
    "source": "https://github.com/deepseek-ai/open-infra-index/blob/main/202502OpenSourceWeek/"
    "day_6_one_more_thing_deepseekV3R1_inference_system_overview.md",
    "gpu": "H800",
    "decode_ep": 144,  # Routed Expert EP144, MLA/Shared Expert DP144, 18 nodes
    "decode_tokens_per_s_per_node": 14_800,  # "~14.8k tokens/s output during decoding", 24-h average
    "gpus_per_node": 8,
    "mean_kv_length": 4_989,  # "average kvcache length per output token"
    "user_tokens_per_s": "20-22",  # "average output speed"
}
PUBLISHED_PER_GPU = PUBLISHED["decode_tokens_per_s_per_node"] / PUBLISHED["gpus_per_node"]


@dataclass(frozen=True)
class ModelShape:
    """A DeepSeek-V3-style decoder: MLA with q-LoRA, ``first_dense`` dense-MLP layers, then MoE layers
    of ``routed_experts`` (top ``top_k``) plus ``shared_experts``, untied embedding and LM head."""

    name: str
    hidden: int
    num_layers: int
    first_dense: int
    routed_experts: int
    top_k: int
    shared_experts: int
    moe_intermediate: int
    dense_intermediate: int
    q_lora_rank: int
    kv_lora_rank: int
    qk_rope_head_dim: int
    qk_nope_head_dim: int
    v_head_dim: int
    num_heads: int
    vocab: int
    expert_groups: int  # group-limited routing: the best topk_groups of expert_groups are searched
    topk_groups: int

    @property
    def moe_layers(self) -> int:
        return self.num_layers - self.first_dense

    @property
    def latent_width(self) -> int:
        return self.kv_lora_rank + self.qk_rope_head_dim

    def kv_bytes_per_token(self, kv_bytes: int = 2) -> int:
        """The latent cache of every layer for one token (MLA: ``c`` and ``k_rope`` only)."""
        return self.num_layers * self.latent_width * kv_bytes

    def attention_params(self) -> int:
        h, heads = self.hidden, self.num_heads
        return (
            h * (self.q_lora_rank + self.latent_width)  # q_a + kv_a (fused qkv_proj)
            + self.q_lora_rank * heads * (self.qk_nope_head_dim + self.qk_rope_head_dim)  # q_b
            + self.kv_lora_rank * heads * (self.qk_nope_head_dim + self.v_head_dim)  # kv_b
            + heads * self.v_head_dim * h  # o_proj
        )

    def expert_params(self) -> int:
        return 3 * self.hidden * self.moe_intermediate

    def routed_params(self) -> int:
        return self.moe_layers * self.routed_experts * self.expert_params()

    def replicated_params(self) -> tuple[int, int]:
        """(linear weights, embedding + LM head) that every DP-attention rank holds in full."""
        linear = (
            self.num_layers * self.attention_params()
            + self.first_dense * 3 * self.hidden * self.dense_intermediate
            + self.moe_layers
            * (self.shared_experts * self.expert_params() + self.hidden * self.routed_experts)
        )
        return linear, 2 * self.vocab * self.hidden


DEEPSEEK_V3 = ModelShape(
    name="deepseek-v3", hidden=7168, num_layers=61, first_dense=3, routed_experts=256, top_k=8,
    shared_experts=1, moe_intermediate=2048, dense_intermediate=18432, q_lora_rank=1536,
    kv_lora_rank=512, qk_rope_head_dim=64, qk_nope_head_dim=128, v_head_dim=128, num_heads=128,
    vocab=129280, expert_groups=8, topk_groups=4,
)  # fmt: skip
# Small enough for a CPU test to run every measured path in seconds; not a model to project.
TINY = ModelShape(
    name="tiny", hidden=64, num_layers=4, first_dense=1, routed_experts=16, top_k=4, shared_experts=1,
    moe_intermediate=32, dense_intermediate=128, q_lora_rank=48, kv_lora_rank=32, qk_rope_head_dim=16,
    qk_nope_head_dim=16, v_head_dim=16, num_heads=4, vocab=256, expert_groups=4, topk_groups=2,
)  # fmt: skip
SHAPES = {s.name: s for s in (DEEPSEEK_V3, TINY)}


@dataclass(frozen=True)
class Assumptions:
    """Everything the projection takes that was not measured; docs/ep-scaling-model.md gives sources."""

    gpus_per_node: int = 8
    nvlink_gb_s: float = 450.0  # H200: 900 GB/s NVLink 4 bidirectional, per direction
    nvlink_efficiency: float = 0.75  # DeepEP: 153-158 GB/s of H800's ~200 GB/s per direction
    rdma_gb_s: float = 50.0  # 400 Gb/s InfiniBand/RoCE NIC per GPU
    rdma_efficiency: float = 0.8  # DeepEP low-latency kernels: 39-46 GB/s at EP64-256
    collective_latency_us: float = 15.0  # fixed cost per dispatch or combine (not from a source)
    imbalance: float = 1.1  # hottest rank's routed pairs / mean (EPLB residual; 1.0 = perfect)
    dispatch_bytes: float = 1.0  # per value: FP8, as DeepSeek dispatches
    dispatch_scale_block: int = 128  # one fp32 scale per 128 dispatched values
    combine_bytes: float = 2.0  # per value: BF16, as DeepSeek combines
    weight_bytes: float = 2.0  # linear weights: bf16 (the engine dequantizes FP8 checkpoints on load)
    embedding_bytes: float = 2.0
    kv_bytes: int = 2
    gpu_memory_gb: float = 141.0  # used when the components JSON does not give the device's own
    reserve_gb: float = 10.0  # activations, CUDA graphs, communication buffers
    context: int | None = None  # KV length; None: the context the attention was measured at
    gemm_time_scale: float = 1.0  # x every measured GEMM (e.g. < 1 for FP8 GEMMs; not measured)
    attention_time_scale: float = 1.0  # x the measured MLA attention (what-if for a faster kernel)
    mtp_tokens_per_step: float = 1.8  # DeepSeek-V3 report: 1.8x TPS; <= 1 drops the MTP column
    mtp_attention_factor: float = 2.0  # verify's KV reads / one step's (mla_decode: one query per sequence)
    max_batch: int | None = None  # None: the largest batch the attention table measured
    batches: tuple[int, ...] | None = None  # fixed batches per rank instead of what memory allows


def nodes(ep: int, gpus_per_node: int) -> int:
    return math.ceil(ep / gpus_per_node)


def local_experts(shape: ModelShape, ep: int) -> int:
    if shape.routed_experts % ep:
        raise ValueError(f"{shape.routed_experts} routed experts do not split evenly over EP {ep}")
    return shape.routed_experts // ep


def weight_gb(shape: ModelShape, ep: int, a: Assumptions) -> float:
    """One GPU's weights: its 1/EP of the routed experts and all of the rest (DP attention)."""
    linear, embedding = shape.replicated_params()
    routed = shape.routed_params() / ep
    return ((routed + linear) * a.weight_bytes + embedding * a.embedding_bytes) / GB


def batch_that_fits(shape: ModelShape, ep: int, context: int, a: Assumptions, memory_gb: float) -> int:
    """Sequences of ``context`` tokens whose latent cache fits beside the weights and the reserve."""
    free = (memory_gb - a.reserve_gb - weight_gb(shape, ep, a)) * GB
    return max(0, int(free // (context * shape.kv_bytes_per_token(a.kv_bytes))))


@dataclass(frozen=True)
class CommBytes:
    """One rank's all-to-all bytes for one MoE layer, split by the link they cross; the 1/EP of the
    pairs routed to the rank's own experts stay on the GPU."""

    dispatch_nvlink: float
    dispatch_rdma: float
    combine_nvlink: float
    combine_rdma: float

    @property
    def total(self) -> float:
        return self.dispatch_nvlink + self.dispatch_rdma + self.combine_nvlink + self.combine_rdma


def comm_bytes(shape: ModelShape, ep: int, pairs: float, a: Assumptions) -> CommBytes:
    """``pairs`` (token, expert) pairs each carry the hidden state out (dispatch) and back (combine).
    Uniform routing: (G - 1)/EP of them go to another GPU of the node, (EP - G)/EP to another node."""
    g = min(ep, a.gpus_per_node)
    nvlink, rdma = (g - 1) / ep, (ep - g) / ep
    dispatch = shape.hidden * (a.dispatch_bytes + (4 / a.dispatch_scale_block if a.dispatch_bytes < 2 else 0))
    combine = shape.hidden * a.combine_bytes
    return CommBytes(
        pairs * dispatch * nvlink, pairs * dispatch * rdma, pairs * combine * nvlink, pairs * combine * rdma
    )


def collective_ms(nvlink_bytes: float, rdma_bytes: float, a: Assumptions) -> float:
    """One dispatch or combine: both links move their share at once; the slower one sets the time."""
    nvlink_s = nvlink_bytes / (a.nvlink_gb_s * a.nvlink_efficiency * GB)
    rdma_s = rdma_bytes / (a.rdma_gb_s * a.rdma_efficiency * GB)
    return a.collective_latency_us / 1e3 + 1e3 * max(nvlink_s, rdma_s)


def layer_comm_ms(shape: ModelShape, ep: int, rows: float, a: Assumptions) -> float:
    """Dispatch plus combine of one MoE layer for ``rows`` tokens per rank; the hottest rank receives
    ``imbalance`` times the mean, so its bytes set the time."""
    if ep == 1:
        return 0.0
    b = comm_bytes(shape, ep, rows * shape.top_k * a.imbalance, a)
    return collective_ms(b.dispatch_nvlink, b.dispatch_rdma, a) + collective_ms(
        b.combine_nvlink, b.combine_rdma, a
    )


def interpolate(points: list[tuple[float, float]], x: float) -> tuple[float, bool]:
    """Piecewise-linear ``y(x)`` and whether ``x`` lies outside the points: below them the first value
    (a smaller batch is not modelled as faster), above them the last segment's slope."""
    pts = sorted(points)
    if not pts:
        raise ValueError("no measured points")
    if x <= pts[0][0]:
        return pts[0][1], x < pts[0][0]
    for (x0, y0), (x1, y1) in zip(pts, pts[1:], strict=False):
        if x <= x1:
            return y0 + (y1 - y0) * (x - x0) / (x1 - x0), False
    if len(pts) == 1:
        return pts[0][1] * x / pts[0][0], True
    (x0, y0), (x1, y1) = pts[-2], pts[-1]
    return y1 + max(0.0, (y1 - y0) / (x1 - x0)) * (x - x1), True


@dataclass
class Components:
    """The measured tables of one ``ep_components`` run, looked up by batch (or pairs) per rank."""

    data: dict
    extrapolated: bool = field(default=False)

    @property
    def shape(self) -> ModelShape:
        return ModelShape(**self.data["shape"])

    @property
    def context(self) -> int:
        return int(self.data["context"])

    def _table(self, name: str, x: float, key: str = "batch", **match) -> float:
        rows = [r for r in self.data["tables"][name] if all(r[k] == v for k, v in match.items())]
        if not rows:
            raise ValueError(f"table {name!r} has no rows for {match}: run ep_components with it")
        y, outside = interpolate([(r[key], r["ms"]) for r in rows], x)
        self.extrapolated |= outside
        return y

    def attention(self, batch: float, context: int, scale: float = 1.0) -> float:
        return self._table("mla_attention", batch) * scale * context / self.context  # KV read ~ context

    def gemms(self, name: str, batch: float) -> float:
        return self._table(name, batch)

    def routed(self, ep: int, pairs: float) -> float:
        return self._table("routed_experts", pairs, key="pairs", ep=ep)

    @property
    def largest_batch(self) -> int:
        return max(r["batch"] for r in self.data["tables"]["mla_attention"])


def compute_ms(
    c: Components, ep: int, rows: float, context: int, a: Assumptions, kv_share: float = 1.0
) -> float:
    """Every layer's compute for ``rows`` decode tokens on one rank, plus the LM head; the attention
    is priced as ``rows * kv_share`` sequences (one query each) reading their KV."""
    s, scale = c.shape, a.gemm_time_scale
    attention = (
        c.attention(rows * kv_share, context, a.attention_time_scale)
        + scale * c.gemms("attention_projections", rows)
        + c.gemms("layer_other", rows)
    )
    routed = c.routed(ep, rows * s.top_k * a.imbalance)
    moe = attention + scale * (c.gemms("shared_expert", rows) + routed)
    dense = attention + scale * c.gemms("dense_mlp", rows)
    return s.first_dense * dense + s.moe_layers * moe + scale * c.gemms("lm_head", rows)


@dataclass(frozen=True)
class StepTimes:
    compute_ms: float
    comm_ms: float
    overlapped_ms: float  # two micro-batches, one's communication behind the other's compute

    @property
    def serial_ms(self) -> float:
        return self.compute_ms + self.comm_ms


def step_times(
    c: Components, ep: int, rows: float, context: int, a: Assumptions, kv_share: float = 1.0
) -> StepTimes:
    moe_layers = c.shape.moe_layers
    compute = compute_ms(c, ep, rows, context, a, kv_share)
    comm = moe_layers * layer_comm_ms(c.shape, ep, rows, a)
    # Two halves: each runs its compute at rows/2 and its own (smaller) collectives; the longer of
    # the two streams sets the step. An executor splits only when that pays, hence the min.
    half = (
        2 * compute_ms(c, ep, rows / 2, context, a, kv_share),
        2 * moe_layers * layer_comm_ms(c.shape, ep, rows / 2, a),
    )
    return StepTimes(compute, comm, min(compute + comm, max(half)))


@dataclass
class Row:
    ep: int
    nodes: int
    local_experts: int
    weight_gb: float
    batch_fit: int  # sequences the KV memory holds at this context
    batch: int  # sequences per rank projected (batch_fit capped at the measured range, or given)
    pairs: float  # routed (token, expert) pairs at the hottest rank per MoE layer
    compute_ms: float = 0.0
    comm_ms: float = 0.0
    serial_ms: float = 0.0
    overlapped_ms: float = 0.0
    tokens_per_s: float = 0.0
    mtp_tokens_per_s: float | None = None
    extrapolated: bool = False
    mtp_extrapolated: bool = False
    note: str = ""


def project(data: dict, eps: list[int], a: Assumptions) -> list[Row]:
    c = Components(data)
    s = c.shape
    context = a.context or c.context
    memory_gb = data.get("device_total_memory_bytes", 0) / GB or a.gpu_memory_gb
    cap = a.max_batch or c.largest_batch
    rows: list[Row] = []
    for ep in eps:
        fit = batch_that_fits(s, ep, context, a, memory_gb)
        batches = list(a.batches) if a.batches else [min(fit, cap) // 2 * 2]
        for batch in batches:
            row = Row(
                ep, nodes(ep, a.gpus_per_node), local_experts(s, ep), weight_gb(s, ep, a), fit, batch, 0.0
            )
            if batch < 2:
                row.note = "weights leave no KV memory" if fit < 2 else "batch < 2"
                rows.append(row)
                continue
            c.extrapolated = False
            t = step_times(c, ep, batch, context, a)
            row.pairs = batch * s.top_k * a.imbalance
            row.compute_ms, row.comm_ms = t.compute_ms, t.comm_ms
            row.serial_ms, row.overlapped_ms = t.serial_ms, t.overlapped_ms
            row.tokens_per_s = batch / t.overlapped_ms * 1e3
            row.extrapolated = c.extrapolated
            if a.mtp_tokens_per_step > 1:
                c.extrapolated = False
                row.mtp_tokens_per_s = (
                    batch * a.mtp_tokens_per_step / mtp_step_ms(c, ep, batch, context, a) * 1e3
                )
                row.mtp_extrapolated = c.extrapolated
            if fit > cap and not a.batches:
                row.note = f"memory holds {fit}; capped at the measured range"
            elif batch > fit:
                row.note = f"batch {batch} exceeds the {fit} sequences the KV memory holds"
            rows.append(row)
    return rows


def mtp_step_ms(c: Components, ep: int, batch: int, context: int, a: Assumptions) -> float:
    """A step that verifies one MTP draft per sequence: 2 rows per sequence through every layer, the
    attention priced as ``mtp_attention_factor`` x ``batch`` sequences (2: the one-query kernel reads
    each KV twice; 1: a kernel reading it once for both rows), plus the MTP module (one MoE layer and
    the LM head) on one row per sequence."""
    s, scale = c.shape, a.gemm_time_scale
    verify = step_times(c, ep, 2 * batch, context, a, a.mtp_attention_factor / 2).overlapped_ms
    attention = (
        c.attention(batch, context, a.attention_time_scale)
        + scale * c.gemms("attention_projections", batch)
        + c.gemms("layer_other", batch)
    )
    module = attention + scale * (
        c.gemms("shared_expert", batch)
        + c.routed(ep, batch * s.top_k * a.imbalance)
        + c.gemms("lm_head", batch)
    )
    return verify + module + layer_comm_ms(s, ep, batch, a)


def format_table(rows: list[Row], a: Assumptions) -> str:
    mtp = f"tok/s/GPU with MTP ({a.mtp_tokens_per_step:g} tok/step)"
    head = [
        "EP", "nodes", "experts/GPU", "weights GB", "KV fits (seqs)", "batch/rank", "compute ms", "comm ms",
        "step ms (serial)", "step ms (2-µbatch overlap)", "tok/s/seq", "tok/s/GPU", mtp,
        "DeepSeek published tok/s/GPU",
    ]  # fmt: skip
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [str(r.ep), str(r.nodes), str(r.local_experts), f"{r.weight_gb:.1f}", str(r.batch_fit)]
        if r.batch < 2:
            cells += ["0"] + ["—"] * 7
        else:
            mark, mtp_mark = "*" if r.extrapolated else "", "*" if r.mtp_extrapolated else ""
            cells += [
                str(r.batch), f"{r.compute_ms:.2f}", f"{r.comm_ms:.2f}", f"{r.serial_ms:.2f}",
                f"{r.overlapped_ms:.2f}", f"{1e3 / r.overlapped_ms:.1f}", f"{r.tokens_per_s:,.0f}{mark}",
                f"{r.mtp_tokens_per_s:,.0f}{mtp_mark}" if r.mtp_tokens_per_s else "—",
            ]  # fmt: skip
        lines.append("| " + " | ".join(cells + ["—"]) + " |")
    p = PUBLISHED
    lines.append(
        f"| {p['decode_ep']} (DeepSeek, {p['gpu']}) | {p['decode_ep'] // p['gpus_per_node']} | 2 + 1 shared "
        f"| — | — | — | — | — | — | — | {p['user_tokens_per_s']} | — | — | {PUBLISHED_PER_GPU:,.0f} ({p['decode_tokens_per_s_per_node']:,} per node) |"
    )
    notes = [f"EP {r.ep}: {r.note}" for r in rows if r.note]
    if any(r.extrapolated or r.mtp_extrapolated for r in rows):
        notes.append("*: some lookup fell outside the measured tables (extrapolated)")
    return "\n".join(lines + ([""] + notes if notes else []))


# Flags that set an Assumptions field of the same name, with its default.
ASSUMPTION_FLAGS = {
    "gpus_per_node": "GPUs per NVLink node",
    "nvlink_gb_s": "NVLink GB/s per GPU per direction",
    "nvlink_efficiency": "share of NVLink bandwidth the all-to-all reaches",
    "rdma_gb_s": "RDMA GB/s per GPU",
    "rdma_efficiency": "share of RDMA bandwidth the all-to-all reaches",
    "collective_latency_us": "fixed microseconds per dispatch or combine",
    "imbalance": "hottest rank's routed pairs over the mean",
    "gpu_memory_gb": "GPU memory when the JSON lacks the device's",
    "reserve_gb": "GPU memory kept for activations, graphs and buffers",
    "gemm_time_scale": "factor on every measured GEMM time",
    "attention_time_scale": "factor on the measured MLA attention time",
    "mtp_tokens_per_step": "MTP tokens per step (<= 1: no MTP column)",
    "mtp_attention_factor": "MTP verify's attention cost over one step's (2: KV read per row)",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add("--components", required=True, metavar="JSON", help="ep_components' output")
    add("--ep", type=int, nargs="+", default=[8, 32, 64], help="EP sizes (default: 8 32 64)")
    add("--batch", type=int, nargs="+", default=None, help="batches per rank (default: what fits)")
    add("--max-batch", type=int, default=None, help="cap on batch/rank (default: largest measured)")
    add("--context", type=int, default=None, help="KV length (default: the measured one)")
    add("--weights", choices=("bf16", "fp8"), default="bf16", help="linear weights' storage (default: bf16)")
    for name, text in ASSUMPTION_FLAGS.items():
        default = getattr(Assumptions(), name)
        add(
            "--" + name.replace("_", "-"),
            type=type(default),
            default=default,
            help=f"{text} (default: {default})",
        )
    add("--json", metavar="OUT", default=None, help="also write the rows and assumptions as JSON to OUT")


def assumptions_from(args: argparse.Namespace) -> Assumptions:
    given = {name: getattr(args, name) for name in ASSUMPTION_FLAGS}
    return Assumptions(
        **given,
        context=args.context,
        max_batch=args.max_batch,
        batches=tuple(args.batch) if args.batch else None,
        weight_bytes=1.0 if args.weights == "fp8" else 2.0,
    )


def run(args: argparse.Namespace) -> int:
    with open(args.components) as f:
        data = json.load(f)
    a = assumptions_from(args)
    rows = project(data, args.ep, a)
    print(f"{data['shape']['name']} on {data.get('device', '?')} (components of {data.get('date', '?')}), "
          f"context {a.context or data['context']}, weights {args.weights}, imbalance {a.imbalance:g}")  # fmt: skip
    print(format_table(rows, a))
    if args.json:
        out = {"assumptions": asdict(a), "published": PUBLISHED, "rows": [asdict(r) for r in rows]}
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)
        print(f"wrote {args.json}", file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m engine.bench.ep_scaling",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
