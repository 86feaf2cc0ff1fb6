"""DeepSeek-V3: DeepSeek-V2's decoder (``deepseek_v2.py``) with V3's router (sigmoid scores, an
``e_score_correction_bias`` that steers selection only, groups ranked by their best two experts,
``noaux_tc``), ``rope_interleave`` from the config, and ``num_nextn_predict_layers``
multi-token-prediction layers stored after the decoder layers (kept, not run)."""

from __future__ import annotations

from dataclasses import replace

from engine.checkpoint.model_config import ModelConfig
from engine.models.deepseek_v2 import mla_kv_specs, parse_deepseek_config
from engine.models.llama import DECODER
from engine.models.registry import Architecture, register


def parse_deepseek_v3_config(raw: dict, architecture: str) -> ModelConfig:
    # transformers' V3 router always adds the correction bias and ranks groups by their best two.
    cfg = parse_deepseek_config(
        raw,
        architecture,
        topk_method="noaux_tc",
        scoring=raw.get("scoring_func") or "sigmoid",
        score_correction_bias=True,
    )
    mtp = raw.get("num_nextn_predict_layers", raw.get("num_mtp_layers", 0)) or 0
    return replace(cfg, num_mtp_layers=int(mtp))


DEEPSEEK_V3 = register(
    Architecture(
        names=("DeepseekV3ForCausalLM",),
        parse_config=parse_deepseek_v3_config,
        kv_cache_specs=mla_kv_specs,
        model_class=DECODER,
    )
)
