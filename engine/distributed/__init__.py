"""Tensor parallelism plumbing: process groups per platform and the collectives the layers call."""

from engine.distributed.group import SINGLE, TPGroup
from engine.distributed.sharding import check_tp_support, kv_heads_per_rank

__all__ = ["SINGLE", "TPGroup", "check_tp_support", "kv_heads_per_rank"]
