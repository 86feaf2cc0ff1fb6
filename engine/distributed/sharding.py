"""Which slice of each weight a rank keeps: heads split evenly, KV heads replicated when fewer than ranks."""

from __future__ import annotations

from engine.checkpoint.model_config import ModelConfig


def check_tp_support(cfg: ModelConfig, tp: int) -> None:
    """Raise ValueError saying why ``cfg`` cannot be split over ``tp`` ranks (nothing when it can)."""
    if tp == 1:
        return
    problems = []
    if cfg.num_heads % tp:
        problems.append(f"num_attention_heads={cfg.num_heads} is not divisible by {tp}")
    if cfg.num_kv_heads % tp and tp % cfg.num_kv_heads:
        problems.append(f"num_key_value_heads={cfg.num_kv_heads} neither divides nor is divisible by {tp}")
    if cfg.intermediate_size % tp:
        problems.append(f"intermediate_size={cfg.intermediate_size} is not divisible by {tp}")
    if cfg.moe is not None:
        for key, size in (
            ("moe_intermediate_size", cfg.moe.intermediate_size),
            ("shared experts' intermediate size", cfg.moe.shared_intermediate_size),
        ):
            if size % tp:
                problems.append(f"{key}={size} is not divisible by {tp}")
    if problems:
        raise ValueError(f"tensor_parallel_size={tp} does not fit this model: " + "; ".join(problems))


def check_ep_support(cfg: ModelConfig, ep: int) -> None:
    """Raise ValueError saying why ``cfg``'s experts cannot be split over ``ep`` ranks."""
    if ep == 1:
        return
    if cfg.moe is None:
        raise ValueError(
            f"expert_parallel_size={ep} needs a mixture-of-experts model; this one is dense (scale a "
            "dense model with more replicas)"
        )
    if cfg.moe.num_experts % ep:
        raise ValueError(
            f"expert_parallel_size={ep} does not fit this model: its {cfg.moe.num_experts} routed experts "
            f"are not divisible by {ep}"
        )


def kv_heads_per_rank(num_kv_heads: int, tp: int) -> int:
    """Fewer KV heads than ranks: each rank keeps (a replica of) one."""
    return max(1, num_kv_heads // tp)


def q_head_rows(num_heads: int, head_dim: int, tp: int, rank: int) -> tuple[int, int]:
    """(first row, rows) of this rank's query heads in q_proj / input columns of o_proj."""
    per = num_heads // tp
    return rank * per * head_dim, per * head_dim


def kv_head_rows(num_kv_heads: int, head_dim: int, tp: int, rank: int) -> tuple[int, int]:
    """(first row, rows) of this rank's key/value heads in k_proj / v_proj.

    With fewer KV heads than ranks, rank r's query heads all belong to KV head r // (tp / num_kv_heads)
    (query head h reads KV head h // (num_heads / num_kv_heads)), so that one head is replicated.
    """
    if num_kv_heads >= tp:
        per = num_kv_heads // tp
        return rank * per * head_dim, per * head_dim
    return (rank // (tp // num_kv_heads)) * head_dim, head_dim


def even_rows(size: int, tp: int, rank: int) -> tuple[int, int]:
    per = size // tp
    return rank * per, per


def vocab_rows(vocab_size: int, tp: int, rank: int) -> tuple[int, int, int]:
    """(first id, ids this rank holds, padded rows per rank): the vocabulary padded to a multiple of tp."""
    per = -(-vocab_size // tp)
    start = rank * per
    return start, max(0, min(per, vocab_size - start)), per
