"""Multi-head latent attention facts of a DeepSeek-V2/V3 checkpoint, parsed into
``ModelConfig.mla``. Pure Python: the control plane reads it too."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class MLAConfig:
    q_lora_rank: int | None  # None: queries projected straight from the hidden state
    kv_lora_rank: int  # width of the compressed latent each token caches
    qk_nope_head_dim: int  # per head, the query/key part without rotary
    qk_rope_head_dim: int  # per head, the rotary part (the key's is shared by all heads)
    v_head_dim: int
    # Rotary pairs interleaved (x0, x1), (x2, x3)... as DeepSeek-V2 and V3's rope_interleave; False:
    # first half against second half.
    rope_interleave: bool = True

    @property
    def qk_head_dim(self) -> int:
        return self.qk_nope_head_dim + self.qk_rope_head_dim
