"""Real model architectures with random weights, for benchmarks where no weights can be downloaded.

Weight values do not change speed when output lengths are fixed (``ignore_eos``), so a random
Llama-3.1-8B measures what the real one would.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

ARCHITECTURES: dict[str, dict] = {
    # A small Llama for exercising the benchmark path on CPU.
    "tiny-llama": {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": 128,
        "intermediate_size": 256,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 32,
        "vocab_size": 2048,
        "max_position_embeddings": 4096,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "tie_word_embeddings": False,
        "hidden_act": "silu",
        "bos_token_id": 1,
        "eos_token_id": 2,
        "torch_dtype": "float32",
    },
    # SmolLM2-135M-Instruct's shape (the demo model, as its GGUF's metadata gives it): the CPU
    # benchmark on a machine where the GGUF file is not installed.
    "smollm2-135m": {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": 576,
        "intermediate_size": 1536,
        "num_hidden_layers": 30,
        "num_attention_heads": 9,
        "num_key_value_heads": 3,
        "head_dim": 64,
        "vocab_size": 49152,
        "max_position_embeddings": 8192,
        "rms_norm_eps": 1e-5,
        "rope_theta": 100000.0,
        "tie_word_embeddings": True,
        "hidden_act": "silu",
        "bos_token_id": 1,
        "eos_token_id": 2,
        "torch_dtype": "float32",
    },
    "llama-3.1-8b": {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": 4096,
        "intermediate_size": 14336,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "vocab_size": 128256,
        "max_position_embeddings": 131072,
        "rms_norm_eps": 1e-5,
        "rope_theta": 500000.0,
        "rope_scaling": {
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192,
        },
        "tie_word_embeddings": False,
        "hidden_act": "silu",
        "attention_bias": False,
        "mlp_bias": False,
        "bos_token_id": 128000,
        "eos_token_id": 128001,
        "torch_dtype": "bfloat16",
    },
}

# DeepSeek-V2-Lite's published config.json (15.7 B parameters, 2.4 B active; MLA without q-LoRA).
ARCHITECTURES["deepseek-v2-lite"] = {
    "architectures": ["DeepseekV2ForCausalLM"],
    "model_type": "deepseek_v2",
    "hidden_size": 2048,
    "intermediate_size": 10944,
    "moe_intermediate_size": 1408,
    "num_hidden_layers": 27,
    "num_attention_heads": 16,
    "num_key_value_heads": 16,
    "vocab_size": 102400,
    "n_routed_experts": 64,
    "n_shared_experts": 2,
    "num_experts_per_tok": 6,
    "first_k_dense_replace": 1,
    "moe_layer_freq": 1,
    "topk_method": "greedy",
    "n_group": 1,
    "topk_group": 1,
    "norm_topk_prob": False,
    "scoring_func": "softmax",
    "routed_scaling_factor": 1.0,
    "q_lora_rank": None,
    "kv_lora_rank": 512,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "v_head_dim": 128,
    "max_position_embeddings": 163840,
    "rope_theta": 10000,
    "rope_scaling": {
        "type": "yarn",
        "factor": 40,
        "original_max_position_embeddings": 4096,
        "beta_fast": 32,
        "beta_slow": 1,
        "mscale": 0.707,
        "mscale_all_dim": 0.707,
    },
    "rms_norm_eps": 1e-6,
    "hidden_act": "silu",
    "attention_bias": False,
    "tie_word_embeddings": False,
    "bos_token_id": 100000,
    "eos_token_id": 100001,
    "torch_dtype": "bfloat16",
}

# Qwen3-30B-A3B's published config.json (30.5 B parameters, 3.3 B active counting the input table).
ARCHITECTURES["qwen3-30b-a3b"] = {
    "architectures": ["Qwen3MoeForCausalLM"],
    "model_type": "qwen3_moe",
    "hidden_size": 2048,
    "intermediate_size": 6144,
    "moe_intermediate_size": 768,
    "num_hidden_layers": 48,
    "num_attention_heads": 32,
    "num_key_value_heads": 4,
    "head_dim": 128,
    "vocab_size": 151936,
    "num_experts": 128,
    "num_experts_per_tok": 8,
    "norm_topk_prob": True,
    "decoder_sparse_step": 1,
    "mlp_only_layers": [],
    "max_position_embeddings": 40960,
    "rope_theta": 1000000.0,
    "rms_norm_eps": 1e-6,
    "hidden_act": "silu",
    "attention_bias": False,
    "tie_word_embeddings": False,
    "bos_token_id": 151643,
    "eos_token_id": 151645,
    "torch_dtype": "bfloat16",
}

# Small twins of the two mixture-of-experts shapes, for exercising the benchmark path on CPU: the
# same layer kinds (a dense first layer, shared experts, MLA without q-LoRA and YaRN for DeepSeek).
ARCHITECTURES["tiny-deepseek-v2"] = {
    **ARCHITECTURES["deepseek-v2-lite"],
    "hidden_size": 128,
    "intermediate_size": 256,
    "moe_intermediate_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "vocab_size": 2048,
    "n_routed_experts": 8,
    "n_shared_experts": 1,
    "num_experts_per_tok": 2,
    "kv_lora_rank": 32,
    "qk_nope_head_dim": 16,
    "qk_rope_head_dim": 8,
    "v_head_dim": 16,
    # YaRN's factor 40 over a 512-token original context, so CPU prompts go past it.
    "rope_scaling": {
        **ARCHITECTURES["deepseek-v2-lite"]["rope_scaling"],
        "original_max_position_embeddings": 512,
    },
    "max_position_embeddings": 40 * 512,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "torch_dtype": "float32",
}
ARCHITECTURES["tiny-qwen3-moe"] = {
    **ARCHITECTURES["qwen3-30b-a3b"],
    "hidden_size": 128,
    "intermediate_size": 256,
    "moe_intermediate_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 32,
    "vocab_size": 2048,
    "num_experts": 8,
    "num_experts_per_tok": 2,
    "max_position_embeddings": 4096,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "torch_dtype": "float32",
}

ARCHITECTURES["llama-3.1-70b"] = {
    **ARCHITECTURES["llama-3.1-8b"],
    "hidden_size": 8192,
    "intermediate_size": 28672,
    "num_hidden_layers": 80,
    "num_attention_heads": 64,
}


# Qwen3-8B's shape with every other layer a 4,096-token sliding window (Qwen3's ``layer_types``),
# "half the layers local" for the sliding-window KV benchmark (engine/bench/swa_replay.py), and a
# small twin of it for the CPU.
ARCHITECTURES["qwen3-8b-swa"] = {
    "architectures": ["Qwen3ForCausalLM"],
    "model_type": "qwen3",
    "hidden_size": 4096,
    "intermediate_size": 12288,
    "num_hidden_layers": 36,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "vocab_size": 151936,
    "max_position_embeddings": 40960,
    "rms_norm_eps": 1e-6,
    "rope_theta": 1000000.0,
    "tie_word_embeddings": False,
    "hidden_act": "silu",
    "attention_bias": False,
    "use_sliding_window": True,
    "sliding_window": 4096,
    "max_window_layers": 0,
    "layer_types": ["sliding_attention", "full_attention"] * 18,
    "bos_token_id": 151643,
    "eos_token_id": 151645,
    "torch_dtype": "bfloat16",
}
ARCHITECTURES["tiny-qwen3-swa"] = {
    **ARCHITECTURES["qwen3-8b-swa"],
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 32,
    "vocab_size": 2048,
    "layer_types": ["sliding_attention", "full_attention"] * 2,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "torch_dtype": "float32",
}


def hf_config(name: str) -> dict:
    try:
        return dict(ARCHITECTURES[name])
    except KeyError:
        raise ValueError(
            f"unknown architecture {name!r}; known: {', '.join(sorted(ARCHITECTURES))}"
        ) from None


def write_config_dir(name: str, out_dir: Path) -> Path:
    """A model directory with config.json and a tokenizer covering the whole vocabulary, but no
    weights: the engine's ``load_format="dummy"`` fills them with random values."""
    config = hf_config(name)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "config.json").write_text(json.dumps(config, indent=2))
    write_id_tokenizer(out_dir, config["vocab_size"], config["eos_token_id"])
    return out_dir


# Every message's content, space-separated: prompts of ``t<id>`` words become those ids.
PLAIN_CHAT_TEMPLATE = "{% for message in messages %}{{ message['content'] }} {% endfor %}"


def write_id_tokenizer(
    out_dir: Path, vocab_size: int, eos_token_id: int, chat_template: str | None = None
) -> None:
    """One word per token id (``t0`` … ``tN``): random token ids decode to readable text."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {f"t{i}": i for i in range(vocab_size)}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="t0"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    backend.decoder = decoders.WordPiece(prefix="##", cleanup=False)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend, unk_token="t0", eos_token=f"t{eos_token_id}"
    )
    if chat_template is not None:
        tokenizer.chat_template = chat_template
    tokenizer.save_pretrained(str(out_dir))


def llama_weight_shapes(config: dict) -> dict[str, tuple[int, ...]]:
    """Hugging Face tensor names and shapes of a dense Llama-family ``config``."""
    if config["model_type"] != "llama":
        raise ValueError(f"random weights are written for llama configs only, not {config['model_type']!r}")
    hidden, inter, vocab = config["hidden_size"], config["intermediate_size"], config["vocab_size"]
    head_dim = config.get("head_dim") or hidden // config["num_attention_heads"]
    q, kv = config["num_attention_heads"] * head_dim, config["num_key_value_heads"] * head_dim
    shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (vocab, hidden)}
    for i in range(config["num_hidden_layers"]):
        p = f"model.layers.{i}."
        shapes.update({
            p + "input_layernorm.weight": (hidden,), p + "post_attention_layernorm.weight": (hidden,),
            p + "self_attn.q_proj.weight": (q, hidden), p + "self_attn.k_proj.weight": (kv, hidden),
            p + "self_attn.v_proj.weight": (kv, hidden), p + "self_attn.o_proj.weight": (hidden, q),
            p + "mlp.gate_proj.weight": (inter, hidden), p + "mlp.up_proj.weight": (inter, hidden),
            p + "mlp.down_proj.weight": (hidden, inter),
        })  # fmt: skip
    shapes["model.norm.weight"] = (hidden,)
    if not config.get("tie_word_embeddings"):
        shapes["lm_head.weight"] = (vocab, hidden)
    return shapes


def write_random_checkpoint(
    name: str, out_dir: Path, device: str = "cpu", seed: int = 0, shard_bytes: int = 4 << 30
) -> Path:
    """A loadable checkpoint directory of architecture ``name`` (Llama family): config, the id
    tokenizer with a plain chat template, and seeded random weights (std 0.02, norms one, as
    ``load_format="dummy"`` draws them) as safetensors shards of about ``shard_bytes``, drawn on
    ``device`` (a GPU draws 8 B parameters in seconds)."""
    import torch
    from safetensors.torch import save_file

    config = hf_config(name)
    shapes = llama_weight_shapes(config)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "config.json").write_text(json.dumps(config, indent=2))
    write_id_tokenizer(out_dir, config["vocab_size"], config["eos_token_id"], PLAIN_CHAT_TEMPLATE)
    dtype = getattr(torch, config["torch_dtype"])
    planned: list[list[str]] = [[]]  # tensor names per shard, planned first so files are named N-of-M
    size = 0
    for tensor_name, shape in shapes.items():
        nbytes = math.prod(shape) * dtype.itemsize
        if size and size + nbytes > shard_bytes:
            planned.append([])
            size = 0
        planned[-1].append(tensor_name)
        size += nbytes
    generator = torch.Generator(device=device).manual_seed(seed)
    weight_map, total = {}, 0
    for k, names in enumerate(planned):
        shard = {}
        for tensor_name in names:
            if "norm" in tensor_name:
                shard[tensor_name] = torch.ones(shapes[tensor_name], dtype=dtype)
                continue
            drawn = torch.empty(shapes[tensor_name], device=device).normal_(0.0, 0.02, generator=generator)
            shard[tensor_name] = drawn.to(dtype).cpu()
        file_name = f"model-{k + 1:05d}-of-{len(planned):05d}.safetensors"
        save_file(shard, str(out_dir / file_name), metadata={"format": "pt"})
        weight_map.update(dict.fromkeys(shard, file_name))
        total += sum(t.nbytes for t in shard.values())
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (out_dir / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")
    return out_dir
