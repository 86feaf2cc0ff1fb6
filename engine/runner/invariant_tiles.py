"""Batch-invariant mode: let the invariant GEMM use the measured tile configs of this model's products.

``kernels/invariant_matmul_configs.py`` runs a table entry only once this process has checked that
it gives the reference config's bits on this device. The runner has that checked right after the
weights load, before warm-up or graph capture compile and record any product.
"""

from __future__ import annotations

import logging

import torch
from torch import nn

from engine.layers.embedding import LMHead
from engine.layers.linear import Linear
from kernels.invariant_matmul_configs import VerifyReport, verify_table

log = logging.getLogger(__name__)


def product_weights(model: nn.Module) -> list[torch.Tensor]:
    """The weight of every product that goes through ``engine.layers.linear.matmul``: each linear
    layer's, and the LM head's (the embedding's when tied)."""
    return [m.weight for m in model.modules() if isinstance(m, Linear | LMHead)]


def verify_tile_table(model: nn.Module) -> VerifyReport:
    report = verify_table(product_weights(model))
    log.info("invariant GEMM tiles: %s", report.summary())
    return report
