from dataclasses import replace

import pytest
import torch

from engine.checkpoint.model_config import load_model_config
from engine.distributed.group import SINGLE, TPGroup
from engine.distributed.sharding import check_tp_support, kv_head_rows, q_head_rows, vocab_rows


def test_query_and_kv_heads_split_evenly():
    # 8 query heads, 4 KV heads, head_dim 2, over 2 ranks: 4 query heads and 2 KV heads each.
    assert [q_head_rows(8, 2, 2, r) for r in (0, 1)] == [(0, 8), (8, 8)]
    assert [kv_head_rows(4, 2, 2, r) for r in (0, 1)] == [(0, 4), (4, 4)]


def test_fewer_kv_heads_than_ranks_replicates_the_group_head():
    # 8 query heads, 2 KV heads (groups of 4), 4 ranks of 2 query heads: ranks 0-1 -> KV 0, 2-3 -> KV 1.
    assert [kv_head_rows(2, 16, 4, r) for r in range(4)] == [(0, 16), (0, 16), (16, 16), (16, 16)]
    assert [kv_head_rows(1, 16, 2, r) for r in range(2)] == [(0, 16), (0, 16)]


def test_vocabulary_is_padded_to_a_multiple_of_the_ranks():
    assert [vocab_rows(10, 4, r) for r in range(4)] == [(0, 3, 3), (3, 3, 3), (6, 3, 3), (9, 1, 3)]
    assert vocab_rows(512, 1, 0) == (0, 512, 512)


def test_models_that_do_not_split_are_refused_with_reasons(tiny_qwen3):
    cfg = load_model_config(tiny_qwen3)  # 4 heads, 2 KV heads, intermediate 128
    check_tp_support(cfg, 1)
    check_tp_support(cfg, 4)  # 2 KV heads each replicated on 2 ranks
    with pytest.raises(ValueError, match="num_attention_heads=4 is not divisible by 3"):
        check_tp_support(cfg, 3)
    with pytest.raises(ValueError, match="intermediate_size=130 is not divisible by 4"):
        check_tp_support(replace(cfg, intermediate_size=130), 4)
    with pytest.raises(ValueError, match="num_key_value_heads=3 neither divides"):
        check_tp_support(replace(cfg, num_heads=6, num_kv_heads=3), 2)


def test_experts_that_do_not_split_are_refused(tiny_models):
    cfg = load_model_config(tiny_models["qwen3_moe"])  # moe_intermediate_size 32
    check_tp_support(cfg, 4)
    with pytest.raises(ValueError, match="moe_intermediate_size=30 is not divisible by 4"):
        check_tp_support(replace(cfg, moe=replace(cfg.moe, intermediate_size=30)), 4)
    with pytest.raises(ValueError, match="shared experts' intermediate size=6 is not divisible by 4"):
        check_tp_support(replace(cfg, moe=replace(cfg.moe, shared_intermediate_size=6)), 4)


def test_single_group_collectives_are_identity_without_torch_distributed():
    x = torch.arange(6.0).reshape(2, 3)
    assert SINGLE.all_reduce(x) is x and SINGLE.all_gather_last_dim(x) is x
    with pytest.raises(ValueError, match="outside a group"):
        TPGroup(rank=2, world_size=2)
