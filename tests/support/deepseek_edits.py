"""Variants of the tiny DeepSeek checkpoints: the query path switched between q-LoRA and a plain
q_proj (new random tensors where the shapes change), or config.json fields changed."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from engine.testing.tiny_deepseek import QK_NOPE_HEAD_DIM, QK_ROPE_HEAD_DIM
from engine.testing.tiny_model import INIT_STD


def with_config(src: Path, dst: Path, **changes) -> Path:
    path = shutil.copytree(src, dst)
    raw = json.loads((path / "config.json").read_text())
    raw.update(changes)
    (path / "config.json").write_text(json.dumps(raw))
    return path


def with_q_lora(src: Path, dst: Path, q_lora_rank: int | None, seed: int = 0) -> Path:
    """``src`` with q-LoRA of ``q_lora_rank`` (q_a_proj, q_a_layernorm, q_b_proj), or None for q_proj."""
    path = with_config(src, dst, q_lora_rank=q_lora_rank)
    raw = json.loads((path / "config.json").read_text())
    hidden, heads = raw["hidden_size"], raw["num_attention_heads"]
    q_width = heads * (QK_NOPE_HEAD_DIM + QK_ROPE_HEAD_DIM)
    gen = torch.Generator().manual_seed(seed)
    tensors = load_file(str(path / "model.safetensors"))
    layers = {n.split(".self_attn.")[0] for n in tensors if ".self_attn." in n}
    for layer in layers:
        a = f"{layer}.self_attn."
        for old in ("q_proj.weight", "q_a_proj.weight", "q_a_layernorm.weight", "q_b_proj.weight"):
            tensors.pop(a + old, None)
        if q_lora_rank is None:
            tensors[a + "q_proj.weight"] = INIT_STD * torch.randn(q_width, hidden, generator=gen)
        else:
            tensors[a + "q_a_proj.weight"] = INIT_STD * torch.randn(q_lora_rank, hidden, generator=gen)
            tensors[a + "q_a_layernorm.weight"] = 1.0 + 0.1 * torch.randn(q_lora_rank, generator=gen)
            tensors[a + "q_b_proj.weight"] = INIT_STD * torch.randn(q_width, q_lora_rank, generator=gen)
    save_file({n: t.contiguous() for n, t in tensors.items()}, str(path / "model.safetensors"))
    return path
