"""Compile every Triton kernel ahead of time for an H100/H200 (sm_90) without a GPU.

Triton's interpreter accepts code that the real compiler rejects (loop-carried type changes,
unsupported dot shapes), so the CPU tests run this in a subprocess without ``TRITON_INTERPRET``:
it lowers each kernel through TTIR, TTGIR, PTX and ptxas to a cubin. Prints one line per variant.
"""

import inspect
import sys

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from kernels import (
    _decode_splits,
    activation,
    fused_moe,
    fused_moe_configs,
    gemv,
    gemv_norm,
    head_gemv,
    invariant_matmul,
    invariant_matmul_configs,
    kv_cache_write,
    latent_cache_write,
    latent_rope_write,
    mla_decode,
    moe_align,
    moe_routing,
    paged_attention,
    paged_attention_decode,
    rms_norm,
    rope_kv_write,
    rotary,
)
from kernels._common import next_power_of_2

FLOAT_PARAMS = {"eps", "norm_eps", "scale_log2e", "softcap_log2e", "scaling"}


def signature(kernel, pointer_types, constexprs, default_pointer="*bf16"):
    types = {}
    for name in inspect.signature(kernel.fn).parameters:
        if name in constexprs:
            types[name] = "constexpr"
        elif name.endswith("_ptr"):
            types[name] = pointer_types.get(name, default_pointer)
        else:
            types[name] = "fp32" if name in FLOAT_PARAMS else "i32"
    return types


def compile_variant(
    label, kernel, constexprs, pointer_types=None, num_warps=4, default_pointer="*bf16", num_stages=3
):
    if "USE_PDL" in inspect.signature(kernel.fn).parameters:
        # As a Hopper launch runs them: waiting for the kernel before, then releasing the next one.
        constexprs = {"USE_PDL": True, **constexprs}
    sig = signature(kernel, pointer_types or {}, constexprs, default_pointer)
    options = {"num_warps": num_warps, "num_stages": num_stages}
    compiled = triton.compile(
        ASTSource(kernel, sig, constexprs), target=GPUTarget("cuda", 90, 32), options=options
    )
    assert compiled.asm.get("cubin"), label
    print(f"compiled {label}")


PAGED_POINTERS = {"block_tables_ptr": "*i32", "seq_lens_ptr": "*i32", "query_start_loc_ptr": "*i32"}
DECODE_POINTERS = {
    **PAGED_POINTERS,
    "partial_max_ptr": "*fp32",
    "partial_sum_ptr": "*fp32",
    "partial_acc_ptr": "*fp32",
    "counter_ptr": "*i32",
}


MOE_POINTERS = {"sorted_pair_ids_ptr": "*i32", "expert_ids_ptr": "*i32", "weights_ptr": "*fp32"}


def compile_moe_and_mla() -> None:
    """The MoE grouped GEMMs at the default decode, mid and prefill tiles (and a ragged fp32 one), the
    small-batch GEMVs at the default tiles (and ragged fp32 ones), and MLA decode and the latent-cache write at DeepSeek's shape."""
    compile_variant("write_latent", latent_cache_write._write_latent_kernel, {"BLOCK_R": 512, "BLOCK_P": 64},
                    {"slot_mapping_ptr": "*i64"})  # fmt: skip
    for neox in (True, False):  # MLA's norm + rotary + latent write at DeepSeek's shape (latent 512, rope 64)
        compile_variant(f"latent_rope_write neox={neox}", latent_rope_write._latent_rope_write_kernel,
                        {"IS_NEOX": neox, "BLOCK_R": 512, "BLOCK_HALF": 32},
                        {"positions_ptr": "*i64", "cos_sin_ptr": "*fp32", "slot_mapping_ptr": "*i64"})  # fmt: skip
    # The absorbed decode's two lifts at DeepSeek's shape: q_nope (128) -> latent (512), latent -> v (128).
    for block_i, block_j in ((128, 64), (128, 32)):
        compile_variant(f"head_gemv block_i={block_i} block_j={block_j}", head_gemv._head_gemv_kernel,
                        {"BLOCK_T": 16, "BLOCK_I": block_i, "BLOCK_J": block_j, "DOT_IN_FP32": False})  # fmt: skip
    tiles = [(fused_moe_configs.default_config(tokens, 8, 128), True, "*bf16") for tokens in (1, 512, 4096)]
    tiles.append((fused_moe_configs.MoeConfig(16, 16, 16), False, "*fp32"))
    for config, even_k, dtype in tiles:
        constexprs = {"BLOCK_M": config.block_m, "BLOCK_N": config.block_n, "BLOCK_K": config.block_k,
                      "EVEN_K": even_k, "DOT_IN_FP32": dtype == "*fp32"}  # fmt: skip
        for name, kernel, pointers in (("gate_up", fused_moe._gate_up_kernel, MOE_POINTERS),
                                       ("down", fused_moe._down_kernel, MOE_POINTERS)):  # fmt: skip
            compile_variant(f"fused_moe {name} {config} even_k={even_k} {dtype}", kernel, constexprs, pointers,
                            num_warps=config.num_warps, default_pointer=dtype, num_stages=config.num_stages)  # fmt: skip
    # The grouped path's combine: DeepSeek-V2-Lite's 8 slots (6 routed + 2 shared) at its hidden 2048, and a ragged fp32 one.
    for top_k, block_n, dtype in ((8, fused_moe.COMBINE_BLOCK_N, "*bf16"), (3, 64, "*fp32")):
        compile_variant(f"fused_moe combine top_k={top_k} n{block_n} {dtype}", fused_moe._combine_kernel,
                        {"TOP_K": top_k, "BLOCK_N": block_n}, {"weights_ptr": "*fp32"}, default_pointer=dtype)  # fmt: skip
    small = fused_moe_configs.default_gemv_config()
    # The down kernel unrolls over the model's top_k and intermediate size: Qwen3-30B-A3B's, and a ragged tiny one.
    for name, kernel, block_n, block_k, even_k, ids, dtype, shape in (
        ("gate_up", fused_moe._gate_up_gemv_kernel, small.up_block_n, small.block_k, True, "*i64", "*bf16", {}),
        ("down", fused_moe._down_gemv_kernel, small.down_block_n, small.block_k, False, "*i64", "*bf16",
         {"TOP_K": 8, "INTER": 768}),
        ("gate_up", fused_moe._gate_up_gemv_kernel, 16, 16, False, "*i32", "*fp32", {}),
        ("down", fused_moe._down_gemv_kernel, 16, 16, True, "*i32", "*fp32", {"TOP_K": 3, "INTER": 48}),
    ):  # fmt: skip
        compile_variant(f"fused_moe small-batch {name} n{block_n} k{block_k} even_k={even_k} {ids} {dtype}", kernel,
                        {"BLOCK_N": block_n, "BLOCK_K": block_k, "EVEN_K": even_k, **shape},
                        {"ids_ptr": ids, "weights_ptr": "*fp32"}, num_warps=small.num_warps, default_pointer=dtype,
                        num_stages=small.num_stages)  # fmt: skip
    for single, rank, rope, dtype, floor in (
        (True, 512, 64, "*bf16", 0),
        (False, 512, 64, "*bf16", 0),
        (False, 512, 64, "*bf16", 64),  # a split floor: empty splits return early
        (False, 64, 16, "*fp32", 0),
    ):
        compile_variant(f"mla_decode single={single} r{rank} p{rope} {dtype} floor={floor}", mla_decode._mla_split_kernel,
                        {"BLOCK_SIZE": 64, "BLOCK_H": 16, "BLOCK_N": 32, "BLOCK_R": rank, "BLOCK_P": rope,
                         "DOT_IN_FP32": dtype == "*fp32", "SINGLE_SPLIT": single, "SPLIT_FLOOR": floor},
                        DECODE_POINTERS, num_warps=8, default_pointer=dtype)  # fmt: skip


ROUTING_POINTERS = {"w_ptr": "*fp32", "partial_ptr": "*fp32", "bias_ptr": "*fp32", "weights_ptr": "*fp32",
                    "ids_ptr": "*i64", "counts_ptr": "*i64", "counted_rows_ptr": "*i64"}  # fmt: skip


def compile_moe_routing() -> None:
    """The router logits at the FMA tiles (one token) and the tl.dot tiles, and expert selection
    ungrouped (Qwen3-MoE), group max (DeepSeek-V2) and sigmoid + bias + top2_sum groups (V3)."""
    for block_t, block_e, block_h, dtype in (
        (1, 2, 512, "*bf16"),
        (1, 4, 512, "*fp32"),
        (16, 32, 32, "*bf16"),
        (64, 64, 32, "*bf16"),  # prompt chunks (WIDE_MIN_TOKENS and up)
    ):
        compile_variant(f"moe_routing logits t{block_t} e{block_e} h{block_h} {dtype}", moe_routing._logits_kernel,
                        {"BLOCK_T": block_t, "BLOCK_E": block_e, "BLOCK_H": block_h},
                        {**ROUTING_POINTERS, "x_ptr": dtype})  # fmt: skip
    for sigmoid, group_score, topk_groups, top_k, renormalize, block_g, block_s, shared, count_some in (
        (False, 0, 1, 8, True, 1, 128, 0, False),
        # DeepSeek-V2's two shared experts fused as slots 7 and 8, padding rows of a MoE block graph
        (False, 1, 3, 6, False, 8, 8, 2, True),
        (True, 2, 4, 8, True, 8, 32, 0, False),
    ):
        compile_variant(f"moe_routing select sigmoid={sigmoid} group_score={group_score} g{block_g} s{block_s} "
                        f"k{top_k} shared{shared}", moe_routing._select_kernel,
                        {"SIGMOID": sigmoid, "HAS_BIAS": sigmoid, "GROUP_SCORE": group_score,
                         "TOPK_GROUPS": topk_groups, "TOP_K": top_k, "RENORMALIZE": renormalize,
                         "SCALE": not renormalize or sigmoid, "COUNT": True, "COUNT_SOME": count_some, "SHARED": shared,
                         "BLOCK_G": block_g,
                         "BLOCK_S": block_s,
                         "BLOCK_K": 8},
                        ROUTING_POINTERS, num_warps=1)  # fmt: skip


def compile_moe_align() -> None:
    """Grouping the pairs by expert for DeepSeek-V2 (64 experts) and V3 (256), and a small odd count
    (3: the tallest one-hot tile)."""
    pointers = {"sorted_pair_ids_ptr": "*i32", "expert_ids_ptr": "*i32", "total_ptr": "*i32"}
    for experts, ids in ((3, "*i32"), (64, "*i64"), (256, "*i64")):
        e_pad = next_power_of_2(experts)
        compile_variant(f"moe_align e{e_pad} {ids}", moe_align._align_kernel,
                        {"CHUNK": moe_align._CHUNK, "E_PAD": e_pad, "BLOCK": moe_align._block(e_pad)},
                        {**pointers, "ids_ptr": ids})  # fmt: skip


def compile_batch_invariant() -> None:
    """The batch-invariant mode's GEMM at its two widths (and a ragged fp32 one) and its attention tiles."""
    for block_n, bias, even_k, dtype in (
        (32, False, True, "*bf16"),
        (64, True, False, "*bf16"),
        (32, True, False, "*fp32"),
    ):
        config = invariant_matmul.MatmulConfig(
            invariant_matmul_configs.BLOCK_M, block_n, invariant_matmul_configs.BLOCK_K
        )
        compile_variant(f"invariant_matmul n{block_n} bias={bias} even_k={even_k} {dtype}",
                        invariant_matmul._invariant_matmul_kernel,
                        {"HAS_BIAS": bias, "DOT_IN_FP32": dtype == "*fp32", "EVEN_K": even_k, "BLOCK_M": config.block_m,
                         "BLOCK_N": block_n, "BLOCK_K": config.block_k, "GROUP_M": invariant_matmul.GROUP_M},
                        default_pointer=dtype, num_warps=config.num_warps, num_stages=config.num_stages)  # fmt: skip
    for window, softcap in ((False, False), (True, False), (True, True)):
        compile_variant(f"invariant paged_attention window={window} softcap={softcap}",
                        paged_attention._paged_attention_kernel,
                        {"GROUP": 4, "BLOCK_SIZE": 16, "BLOCK_Q": 16, "BLOCK_M": 64, "BLOCK_N": 64,
                         "BLOCK_D": 128, "USE_WINDOW": window, "DOT_IN_FP32": False, "USE_SOFTCAP": softcap},
                        PAGED_POINTERS, num_warps=4)  # fmt: skip


def main() -> int:
    for residual in (False, True):
        compile_variant(f"rms_norm residual={residual}", rms_norm._rms_norm_kernel,
                        {"HAS_RESIDUAL": residual, "BLOCK": 4096}, num_warps=8)  # fmt: skip
    for gelu in (False, True):
        compile_variant(f"act_and_mul gelu_tanh={gelu}", activation._act_and_mul_kernel,
                        {"GELU_TANH": gelu, "BLOCK": 1024})  # fmt: skip
    for neox in (True, False):
        compile_variant(f"rotary neox={neox}", rotary._rotary_kernel,
                        {"IS_NEOX": neox, "BLOCK_HQ": 32, "BLOCK_HK": 8, "BLOCK_HALF": 64},
                        {"positions_ptr": "*i64", "cos_sin_ptr": "*fp32"})  # fmt: skip
    compile_variant("write_kv_cache", kv_cache_write._write_kv_cache_kernel, {"BLOCK_H": 8, "BLOCK_D": 128},
                    {"slot_mapping_ptr": "*i64"})  # fmt: skip
    # qk_norm: Qwen3's per-head norms (bf16 weights, rounded) and Gemma 3's (fp32 weights, rounded once)
    for neox, return_kv, block_h, qk_norm, round_normed in ((True, False, 1, False, True), (True, True, 4, False, True),
                                                            (False, False, 1, False, True), (True, False, 1, True, True),
                                                            (True, True, 4, True, False)):  # fmt: skip
        norm_pointer = "*bf16" if round_normed else "*fp32"
        compile_variant(f"rope_kv_write neox={neox} return_kv={return_kv} block_h={block_h} qk_norm={qk_norm}",
                        rope_kv_write._rope_kv_write_kernel,
                        {"IS_NEOX": neox, "RETURN_KV": return_kv, "QK_NORM": qk_norm, "ROUND_NORMED": round_normed,
                         "BLOCK_H": block_h, "BLOCK_HALF": 64},
                        {"positions_ptr": "*i64", "cos_sin_ptr": "*fp32", "slot_mapping_ptr": "*i64",
                         "q_norm_ptr": norm_pointer, "k_norm_ptr": norm_pointer},
                        num_warps=block_h)  # fmt: skip
    # the last: Gemma-2's soft-capped scores on its local (windowed) layers
    for window, dtype, softcap in ((False, "*bf16", False), (True, "*fp16", False), (False, "*fp32", False),
                                   (True, "*bf16", True)):  # fmt: skip
        fp32 = dtype == "*fp32"
        compile_variant(f"paged_attention window={window} softcap={softcap} {dtype}",
                        paged_attention._paged_attention_kernel,
                        {"GROUP": 4, "BLOCK_SIZE": 16, "BLOCK_Q": 32, "BLOCK_M": 128, "BLOCK_N": 64,
                         "BLOCK_D": 128, "USE_WINDOW": window, "DOT_IN_FP32": fp32, "USE_SOFTCAP": softcap},
                        PAGED_POINTERS, num_warps=8, default_pointer=dtype)  # fmt: skip
        splits = ((False, False),) if softcap else ((False, False), (True, False), (False, True))
        for single, fused in splits:
            compile_variant(f"decode split window={window} single={single} fused={fused} softcap={softcap} {dtype}",
                            paged_attention_decode._decode_split_kernel,
                            {"GROUP": 4, "BLOCK_SIZE": 16, "BLOCK_G": 16, "BLOCK_N": 64, "BLOCK_D": 128,
                             "USE_WINDOW": window, "DOT_IN_FP32": fp32, "USE_SOFTCAP": softcap,
                             "SINGLE_SPLIT": single, "FUSED_REDUCE": fused, "BLOCK_S": 32 if fused else 1},
                            DECODE_POINTERS, default_pointer=dtype)  # fmt: skip
    for block_n, min_keys in ((1, 0), (32, 64)):  # every split, or only those holding keys
        compile_variant(f"decode reduce live_min_keys={min_keys}", _decode_splits.decode_reduce_kernel,
                        {"BLOCK_S": 8, "BLOCK_D": 128, "LIVE_BLOCK_N": block_n, "LIVE_MIN_KEYS": min_keys},
                        DECODE_POINTERS)  # fmt: skip
    gemv_pointers = {"partial_ptr": "*fp32", "counter_ptr": "*i32"}
    for use_dot, block_m, block_n, block_k, stages, gated, split, fused, dtype in (
        (True, 16, 16, 256, 4, False, False, False, "*bf16"),  # mma.sync tile
        (True, 16, 64, 128, 4, True, False, False, "*bf16"),  # wgmma tile, SwiGLU input
        (True, 16, 32, 256, 4, False, True, False, "*fp16"),
        (True, 16, 32, 256, 4, False, True, True, "*fp16"),
        (True, 16, 16, 256, 4, True, True, True, "*bf16"),
        (False, 1, 16, 256, 2, False, False, False, "*bf16"),
        (False, 1, 16, 256, 2, True, True, False, "*bf16"),
        (False, 1, 16, 256, 2, True, True, True, "*bf16"),
    ):
        constexprs = {"HAS_BIAS": not gated, "GATED": gated, "SPLIT": split, "FUSED_REDUCE": fused,
                      "USE_DOT": use_dot, "DOT_IN_FP32": False, "EVEN_K": True, "BLOCK_M": block_m,
                      "BLOCK_N": block_n, "BLOCK_K": block_k}  # fmt: skip
        compile_variant(f"gemv dot={use_dot} n{block_n} k{block_k} gated={gated} split={split} fused={fused} "
                        f"{dtype}", gemv._gemv_kernel, constexprs, gemv_pointers, default_pointer=dtype,
                        num_stages=stages)  # fmt: skip
    for use_dot, block_m, block_n, block_k, stages, residual, split, dtype in (
        (True, 16, 16, 256, 4, True, False, "*bf16"),
        (True, 16, 64, 128, 4, False, True, "*bf16"),
        (False, 1, 16, 256, 2, True, False, "*bf16"),
        (False, 1, 8, 512, 2, True, True, "*fp16"),
    ):
        constexprs = {"HAS_RESIDUAL": residual, "HAS_BIAS": split, "SPLIT": split, "USE_DOT": use_dot,
                      "DOT_IN_FP32": False, "EVEN_K": True, "BLOCK_M": block_m, "BLOCK_N": block_n,
                      "BLOCK_K": block_k}  # fmt: skip
        compile_variant(f"gemv_norm dot={use_dot} n{block_n} k{block_k} residual={residual} split={split} "
                        f"{dtype}", gemv_norm._gemv_norm_kernel, constexprs, gemv_pointers,
                        default_pointer=dtype, num_stages=stages)  # fmt: skip
    compile_variant("gemv split reduce", gemv._split_reduce_kernel,
                    {"SPLITS": 4, "HAS_BIAS": True, "BLOCK": 1024}, gemv_pointers)  # fmt: skip
    compile_moe_and_mla()
    compile_moe_routing()
    compile_moe_align()
    compile_batch_invariant()
    return 0


if __name__ == "__main__":
    sys.exit(main())
