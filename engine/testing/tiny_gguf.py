"""A GGUF file written from a Hugging Face checkpoint directory, as llama.cpp's ``convert_hf_to_gguf``
lays it out (names, Llama's permuted q/k rows, tokenizer and chat template in the metadata): the
tests' way to get a GGUF twin of a tiny checkpoint without llama.cpp.

Only what the tiny checkpoints use: Llama-family decoders with plain RoPE, full attention, and a
byte-level BPE tokenizer. ``qtype`` quantizes the 2-D weights (norms stay F32), as llama.cpp does.
"""

from __future__ import annotations

import json
from pathlib import Path

from engine.checkpoint.gguf_weights import BLOCK_NAMES, GLOBAL_NAMES

GGUF_ARCHES = {"LlamaForCausalLM": "llama", "Qwen2ForCausalLM": "qwen2", "Qwen3ForCausalLM": "qwen3"}
# The reader's GGUF -> Hugging Face names, the other way round.
HF_TO_GGUF_BLOCK = {hf: gguf_name for gguf_name, hf in BLOCK_NAMES.items()}
HF_TO_GGUF_GLOBAL = {hf: gguf_name for gguf_name, hf in GLOBAL_NAMES.items()}
CONTROL, NORMAL = 3, 1  # gguf.TokenType values


def write_gguf(model_dir: str | Path, out_file: str | Path, qtype: str = "F32") -> Path:
    import gguf

    model_dir, out_file = Path(model_dir), Path(out_file)
    config = json.loads((model_dir / "config.json").read_text())
    arch = GGUF_ARCHES.get(config["architectures"][0])
    rope = config.get("rope_parameters") or config.get("rope_scaling") or {}
    if arch is None or rope.get("rope_type", "default") != "default" or config.get("sliding_window"):
        raise ValueError(f"{model_dir}: only plain-RoPE, full-attention {', '.join(GGUF_ARCHES)} are written")
    writer = gguf.GGUFWriter(out_file, arch)
    heads, kv_heads = config["num_attention_heads"], config["num_key_value_heads"]
    writer.add_block_count(config["num_hidden_layers"])
    writer.add_context_length(config["max_position_embeddings"])
    writer.add_embedding_length(config["hidden_size"])
    writer.add_feed_forward_length(config["intermediate_size"])
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    writer.add_key_length(config["head_dim"])
    writer.add_value_length(config["head_dim"])
    writer.add_layer_norm_rms_eps(config["rms_norm_eps"])
    writer.add_rope_freq_base(rope.get("rope_theta", config.get("rope_theta", 10000.0)))
    writer.add_file_type(
        gguf.LlamaFileType.ALL_F32 if qtype == "F32" else gguf.LlamaFileType[f"MOSTLY_{qtype}"]
    )
    _add_tokenizer(writer, model_dir)
    for name, array in _gguf_tensors(model_dir, arch, heads, kv_heads):
        if qtype != "F32" and array.ndim == 2:
            quant = gguf.GGMLQuantizationType[qtype]
            writer.add_tensor(name, gguf.quants.quantize(array, quant), raw_dtype=quant)
        else:
            writer.add_tensor(name, array)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return out_file


def _add_tokenizer(writer, model_dir: Path) -> None:
    tokenizer = json.loads((model_dir / "tokenizer.json").read_text())
    tokenizer_config = json.loads((model_dir / "tokenizer_config.json").read_text())
    generation = json.loads((model_dir / "generation_config.json").read_text())
    vocab = dict(tokenizer["model"]["vocab"])
    specials = {t["content"] for t in tokenizer["added_tokens"] if t["special"]}
    vocab.update({t["content"]: t["id"] for t in tokenizer["added_tokens"]})
    tokens = sorted(vocab, key=vocab.__getitem__)
    merges = [m if isinstance(m, str) else " ".join(m) for m in tokenizer["model"]["merges"]]
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_types([CONTROL if t in specials else NORMAL for t in tokens])
    writer.add_token_merges(merges)
    if generation.get("bos_token_id") is not None:
        writer.add_bos_token_id(generation["bos_token_id"])
    eos_id = vocab[tokenizer_config["eos_token"]]
    writer.add_eos_token_id(eos_id)
    for extra in [i for i in generation.get("eos_token_id") or [] if i != eos_id][:1]:
        writer.add_eot_token_id(extra)  # the tiny flavors' one extra stop token ends a turn
    chat_template = tokenizer_config.get("chat_template")
    template_file = model_dir / "chat_template.jinja"
    writer.add_chat_template(template_file.read_text() if template_file.is_file() else chat_template)


def _gguf_tensors(model_dir: Path, arch: str, heads: int, kv_heads: int):
    """(GGUF name, float32 numpy array), with Llama's q/k rows permuted as llama.cpp's converter does."""
    from safetensors.numpy import load_file

    for path in sorted(model_dir.glob("*.safetensors")):
        for hf_name, array in load_file(str(path)).items():
            stem, kind = hf_name.rsplit(".", 1)
            if stem in HF_TO_GGUF_GLOBAL:
                name = f"{HF_TO_GGUF_GLOBAL[stem]}.{kind}"
            else:
                _, _, block, part = stem.split(".", 3)
                name = f"blk.{block}.{HF_TO_GGUF_BLOCK[part]}.{kind}"
            array = array.astype("float32")
            if arch == "llama" and ".attn_q." in name:
                array = _permute(array, heads)
            elif arch == "llama" and ".attn_k." in name:
                array = _permute(array, kv_heads)
            yield name, array


def _permute(weight, num_heads: int):
    """llama.cpp's ``permute``: per head, rows (2, pair) -> (pair, 2)."""
    half = weight.shape[0] // num_heads // 2
    return weight.reshape(num_heads, 2, half, *weight.shape[1:]).swapaxes(1, 2).reshape(weight.shape)
