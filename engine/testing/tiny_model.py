"""Small random checkpoints with a real tokenizer, for tests and the demo; nothing is downloaded.

The tokenizer is a byte-level BPE trained here on Python's own standard-library source, so it has
real merges, multi-byte behaviour and special tokens. Weights are drawn from a seeded generator and
written as safetensors under Hugging Face names, and ``config.json`` comes from transformers' own
config classes, so ``transformers`` loads the directory as the correctness oracle.
"""

from __future__ import annotations

import json
import sysconfig
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from engine.testing.tiny_deepseek import DEEPSEEK_ARCHES, deepseek_config, deepseek_weight_shapes

ARCHES = (
    "llama",
    "mistral",
    "qwen2",
    "qwen3",
    "qwen3_moe",
    "mixtral",
    "deepseek_v2",
    "deepseek_v3",
    "gemma2",
    "gemma3",
)
DTYPES = ("float32", "bfloat16", "float16")
VOCAB_SIZE = 512
HIDDEN, LAYERS, HEADS, KV_HEADS, HEAD_DIM, INTERMEDIATE = 64, 2, 4, 2, 16, 128
MAX_POSITIONS = 1024


@dataclass(frozen=True)
class _Dims:
    """Model size; the defaults are the test model. Benchmarks ask for a wider, deeper, longer one
    so that prefill costs what it does relative to fixed per-request overheads."""

    hidden: int = HIDDEN
    layers: int = LAYERS
    max_positions: int = MAX_POSITIONS

    @property
    def head_dim(self) -> int:
        return self.hidden // HEADS

    @property
    def intermediate(self) -> int:
        return 2 * self.hidden


# Large enough that random logits are well separated (greedy ties would make oracle tests flaky).
INIT_STD = 0.08
CORPUS_MODULES = ("argparse.py", "textwrap.py", "string.py", "json/decoder.py")


@dataclass(frozen=True)
class _MoEFlavor:
    """A mixture-of-experts flavor: its layers' MLPs, but ``dense_layers``, are ``MOE_EXPERTS`` routed
    experts, each named ``<block>.experts.<e>.<projection>`` (gate, up, down) as the hub does."""

    block: str
    projections: tuple[str, str, str]
    config: tuple[tuple[str, object], ...]  # config.json fields
    dense_layers: tuple[int, ...] = ()


MOE_EXPERTS, MOE_TOP_K, MOE_INTERMEDIATE = 8, 2, 32


@dataclass(frozen=True)
class _Flavor:
    config_class: str
    template: str
    specials: tuple[str, ...]
    bos: str | None
    eos: str  # tokenizer eos
    extra_eos: tuple[str, ...]  # generation_config adds these
    qkv_bias: bool = False
    qk_norm: bool = False
    tied: bool = False
    moe: _MoEFlavor | None = None
    deepseek: str | None = None  # DeepSeek-V2/V3 shapes (engine.testing.tiny_deepseek)
    # Gemma: four norms a layer, stored as offsets from one (the model scales by 1 + weight).
    gemma: bool = False
    layers: int = LAYERS  # the default depth
    config: tuple[tuple[str, object], ...] = ()  # more config.json fields
    model_class: str | None = None  # the architectures entry, when not the config class's name

    @property
    def architecture(self) -> str:
        return self.model_class or self.config_class.replace("Config", "ForCausalLM")


_CHATML = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
_GEMMA = ("<pad>", "<eos>", "<bos>", "<start_of_turn>", "<end_of_turn>")
# Windows of 16 tokens, shorter than the tests' prompts, and a softmax scale that is not head_dim's.
_GEMMA_CONFIG = (("sliding_window", 16), ("query_pre_attn_scalar", 24))
_LLAMA3 = ("<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>")
FLAVORS = {
    "llama": _Flavor(
        "LlamaConfig", "llama3.jinja", _LLAMA3, "<|begin_of_text|>", "<|end_of_text|>", ("<|eot_id|>",)
    ),
    "mistral": _Flavor(
        "MistralConfig", "llama3.jinja", _LLAMA3, "<|begin_of_text|>", "<|end_of_text|>", ("<|eot_id|>",)
    ),
    "qwen2": _Flavor(
        "Qwen2Config", "chatml.jinja", _CHATML, None, "<|im_end|>", ("<|endoftext|>",), qkv_bias=True
    ),
    "qwen3": _Flavor(
        "Qwen3Config",
        "chatml.jinja",
        _CHATML,
        None,
        "<|im_end|>",
        ("<|endoftext|>",),
        qk_norm=True,
        tied=True,
    ),
    "qwen3_moe": _Flavor(
        "Qwen3MoeConfig",
        "chatml.jinja",
        _CHATML,
        None,
        "<|im_end|>",
        ("<|endoftext|>",),
        qk_norm=True,
        moe=_MoEFlavor(
            "mlp",
            ("gate_proj", "up_proj", "down_proj"),
            (
                ("num_experts", MOE_EXPERTS),
                ("num_experts_per_tok", MOE_TOP_K),
                ("moe_intermediate_size", MOE_INTERMEDIATE),
                ("mlp_only_layers", [0]),
                ("norm_topk_prob", True),
            ),
            dense_layers=(0,),
        ),
    ),
    **{
        arch: _Flavor(
            "DeepseekV2Config" if arch == "deepseek_v2" else "DeepseekV3Config",
            "llama3.jinja",
            _LLAMA3,
            "<|begin_of_text|>",
            "<|end_of_text|>",
            ("<|eot_id|>",),
            deepseek=arch,
        )
        for arch in DEEPSEEK_ARCHES
    },
    "gemma2": _Flavor(
        "Gemma2Config",
        "gemma.jinja",
        _GEMMA,
        "<bos>",
        "<eos>",
        ("<end_of_turn>",),
        tied=True,
        gemma=True,
        layers=4,  # local, global, local, global
        # Gemma-2's own caps (50, 30) barely touch a tiny model's scores (< 1) and logits (< 3); these
        # move its logits by 4 % (attention) and 10 % (final) of their largest.
        config=(*_GEMMA_CONFIG, ("attn_logit_softcapping", 2.0), ("final_logit_softcapping", 5.0)),
    ),
    "gemma3": _Flavor(
        "Gemma3TextConfig",
        "gemma.jinja",
        _GEMMA,
        "<bos>",
        "<eos>",
        ("<end_of_turn>",),
        qk_norm=True,
        tied=True,
        gemma=True,
        layers=6,  # local, local, global, local, local, global
        config=(
            *_GEMMA_CONFIG,
            ("sliding_window_pattern", 3),
            (
                "rope_parameters",
                {
                    "full_attention": {"rope_type": "linear", "factor": 2.0, "rope_theta": 1_000_000.0},
                    "sliding_attention": {"rope_type": "default", "rope_theta": 10_000.0},
                },
            ),
        ),
        model_class="Gemma3ForCausalLM",
    ),
    "mixtral": _Flavor(
        "MixtralConfig",
        "llama3.jinja",
        _LLAMA3,
        "<|begin_of_text|>",
        "<|end_of_text|>",
        ("<|eot_id|>",),
        moe=_MoEFlavor(
            "block_sparse_moe",
            ("w1", "w3", "w2"),
            (
                ("num_local_experts", MOE_EXPERTS),
                ("num_experts_per_tok", MOE_TOP_K),
                ("intermediate_size", MOE_INTERMEDIATE),
                ("sliding_window", 24),  # as Mistral's, smaller than test prompts
            ),
        ),
    ),
}


def make_tiny_model(
    out_dir: str | Path,
    arch: str = "qwen3",
    seed: int = 0,
    dtype: str = "float32",
    num_shards: int = 1,
    num_kv_heads: int = KV_HEADS,
    hidden_size: int = HIDDEN,
    num_layers: int | None = None,
    max_positions: int = MAX_POSITIONS,
) -> Path:
    """Write a tiny random checkpoint for ``arch`` into ``out_dir`` and return the directory.

    ``num_kv_heads`` (a divisor of the 4 query heads) lets tests cover 1 KV head, e.g. fewer than
    tensor-parallel ranks. ``hidden_size`` (a multiple of 4 query heads x 2), ``num_layers`` (default:
    the flavor's, 2 but for Gemma's) and ``max_positions`` make a bigger model for benchmarks."""
    if arch not in FLAVORS:
        raise ValueError(f"unknown arch {arch!r}; choose one of {', '.join(ARCHES)}")
    if num_layers is None:
        num_layers = FLAVORS[arch].layers
    if dtype not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}; choose one of {', '.join(DTYPES)}")
    if num_shards < 1:
        raise ValueError(f"num_shards must be >= 1, got {num_shards}")
    if num_kv_heads not in (1, 2, 4):
        raise ValueError(f"num_kv_heads must divide {HEADS} query heads (1, 2 or 4), got {num_kv_heads}")
    if hidden_size < 8 or hidden_size % (2 * HEADS) or num_layers < 1 or max_positions < 16:
        raise ValueError(
            f"hidden_size must be a multiple of {2 * HEADS} (>= 8), num_layers >= 1, max_positions >= 16; "
            f"got {hidden_size}, {num_layers}, {max_positions}"
        )
    dims = _Dims(hidden_size, num_layers, max_positions)
    flavor = FLAVORS[arch]
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = _write_tokenizer(out, flavor, dims)
    ids = {tok: tokenizer.convert_tokens_to_ids(tok) for tok in flavor.specials}
    _write_config(out, arch, flavor, ids, dtype, num_kv_heads, dims)
    _write_weights(out, flavor, seed, dtype, num_shards, num_kv_heads, dims)
    return out


def _train_bpe(flavor: _Flavor):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=list(flavor.specials),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus_lines(), trainer=trainer)
    return tok


def corpus_lines() -> list[str]:
    """The text the tokenizer is trained on (and ``engine.testing.tiny_training`` trains weights on), one line
    per item."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    texts = []
    for name in CORPUS_MODULES:
        path = stdlib / name
        if path.is_file():
            texts.extend(path.read_text(encoding="utf-8", errors="replace").splitlines())
    if not texts:  # a stripped Python without sources: fall back to this file's own text
        texts = Path(__file__).read_text(encoding="utf-8").splitlines()
    return texts


def _write_tokenizer(out: Path, flavor: _Flavor, dims: _Dims = _Dims()):
    from transformers import PreTrainedTokenizerFast

    template = (
        resources.files("engine.testing.tiny_templates").joinpath(flavor.template).read_text(encoding="utf-8")
    )
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=_train_bpe(flavor),
        bos_token=flavor.bos,
        eos_token=flavor.eos,
        pad_token=flavor.specials[0] if flavor.bos is None else flavor.eos,
        additional_special_tokens=[t for t in flavor.specials if t not in (flavor.bos, flavor.eos)],
        model_max_length=dims.max_positions,
    )
    tokenizer.chat_template = template
    tokenizer.save_pretrained(out)
    return tokenizer


def _write_config(
    out: Path,
    arch: str,
    flavor: _Flavor,
    ids: dict[str, int],
    dtype: str,
    num_kv_heads: int,
    dims: _Dims = _Dims(),
) -> None:
    import transformers

    eos_ids = [ids[flavor.eos]] + [ids[t] for t in flavor.extra_eos]
    kwargs = dict(
        vocab_size=VOCAB_SIZE,
        hidden_size=dims.hidden,
        intermediate_size=dims.intermediate,
        num_hidden_layers=dims.layers,
        num_attention_heads=HEADS,
        num_key_value_heads=num_kv_heads,
        head_dim=dims.head_dim,
        max_position_embeddings=dims.max_positions,
        rms_norm_eps=1e-6,
        tie_word_embeddings=flavor.tied,
        bos_token_id=ids.get(flavor.bos) if flavor.bos else None,
        eos_token_id=ids[flavor.eos],
        pad_token_id=None,
    )
    if arch == "llama":
        kwargs["rope_parameters"] = {
            "rope_type": "llama3",
            "rope_theta": 10000.0,
            "factor": 4.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 256,
        }
    if arch == "mistral":
        kwargs["sliding_window"] = 24  # smaller than test prompts, so the window is exercised
    if flavor.moe is not None:
        kwargs.update(flavor.moe.config)
    kwargs.update(flavor.config)
    if flavor.deepseek is not None:
        del kwargs["head_dim"]  # qk_nope_head_dim + qk_rope_head_dim, with v_head_dim apart
        kwargs.update(deepseek_config(flavor.deepseek, HEADS, dims.layers))
    config = getattr(transformers, flavor.config_class)(**kwargs)
    config.architectures = [flavor.architecture]
    config.dtype = dtype
    config.to_json_file(out / "config.json")
    generation = {"bos_token_id": kwargs["bos_token_id"], "eos_token_id": eos_ids, "do_sample": False}
    (out / "generation_config.json").write_text(json.dumps(generation, indent=2) + "\n")


def _weight_shapes(
    flavor: _Flavor, num_kv_heads: int = KV_HEADS, dims: _Dims = _Dims()
) -> dict[str, tuple[int, ...]]:
    if flavor.deepseek is not None:
        return deepseek_weight_shapes(
            flavor.deepseek, dims.hidden, dims.intermediate, HEADS, dims.layers, VOCAB_SIZE
        )
    HIDDEN, INTERMEDIATE, HEAD_DIM = dims.hidden, dims.intermediate, dims.head_dim  # noqa: N806
    q, kv = HEADS * HEAD_DIM, num_kv_heads * HEAD_DIM
    shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (VOCAB_SIZE, HIDDEN)}
    for i in range(dims.layers):
        p = f"model.layers.{i}."
        shapes.update(
            {
                p + "input_layernorm.weight": (HIDDEN,),
                p + "post_attention_layernorm.weight": (HIDDEN,),
                p + "self_attn.q_proj.weight": (q, HIDDEN),
                p + "self_attn.k_proj.weight": (kv, HIDDEN),
                p + "self_attn.v_proj.weight": (kv, HIDDEN),
                p + "self_attn.o_proj.weight": (HIDDEN, q),
                p + "mlp.gate_proj.weight": (INTERMEDIATE, HIDDEN),
                p + "mlp.up_proj.weight": (INTERMEDIATE, HIDDEN),
                p + "mlp.down_proj.weight": (HIDDEN, INTERMEDIATE),
            }
        )
        if flavor.moe is not None and i not in flavor.moe.dense_layers:
            for proj in ("gate_proj", "up_proj", "down_proj"):
                del shapes[p + f"mlp.{proj}.weight"]
            shapes.update(_expert_shapes(p, flavor.moe, HIDDEN))
        if flavor.qkv_bias:
            shapes.update({p + "self_attn.q_proj.bias": (q,), p + "self_attn.k_proj.bias": (kv,)})
            shapes[p + "self_attn.v_proj.bias"] = (kv,)
        if flavor.qk_norm:
            shapes.update(
                {p + "self_attn.q_norm.weight": (HEAD_DIM,), p + "self_attn.k_norm.weight": (HEAD_DIM,)}
            )
        if flavor.gemma:
            shapes[p + "pre_feedforward_layernorm.weight"] = (HIDDEN,)
            shapes[p + "post_feedforward_layernorm.weight"] = (HIDDEN,)
    shapes["model.norm.weight"] = (HIDDEN,)
    if not flavor.tied:
        shapes["lm_head.weight"] = (VOCAB_SIZE, HIDDEN)
    return shapes


def _expert_shapes(layer_prefix: str, moe: _MoEFlavor, hidden: int) -> dict[str, tuple[int, ...]]:
    block = layer_prefix + moe.block
    gate, up, down = moe.projections
    shapes: dict[str, tuple[int, ...]] = {block + ".gate.weight": (MOE_EXPERTS, hidden)}
    for e in range(MOE_EXPERTS):
        expert = f"{block}.experts.{e}."
        shapes[expert + gate + ".weight"] = (MOE_INTERMEDIATE, hidden)
        shapes[expert + up + ".weight"] = (MOE_INTERMEDIATE, hidden)
        shapes[expert + down + ".weight"] = (hidden, MOE_INTERMEDIATE)
    return shapes


def _write_weights(
    out: Path,
    flavor: _Flavor,
    seed: int,
    dtype: str,
    num_shards: int,
    num_kv_heads: int,
    dims: _Dims = _Dims(),
) -> None:
    import torch
    from safetensors.torch import save_file

    gen = torch.Generator().manual_seed(seed)
    tensors = {}
    for name, shape in _weight_shapes(flavor, num_kv_heads, dims).items():
        if name.endswith("norm.weight"):  # norms near one, but not exactly, so a missing one shows
            t = (0.0 if flavor.gemma else 1.0) + 0.1 * torch.randn(shape, generator=gen)
        else:
            t = INIT_STD * torch.randn(shape, generator=gen)
        tensors[name] = t.to(getattr(torch, dtype)).contiguous()
    for stale in list(out.glob("model*.safetensors")) + list(out.glob("model.safetensors.index.json")):
        stale.unlink()
    if num_shards == 1:
        save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
        return
    names = list(tensors)
    weight_map = {}
    for k in range(num_shards):
        shard_name = f"model-{k + 1:05d}-of-{num_shards:05d}.safetensors"
        part = {n: tensors[n] for n in names[k::num_shards]}
        save_file(part, str(out / shard_name), metadata={"format": "pt"})
        weight_map.update(dict.fromkeys(part, shard_name))
    total = sum(t.numel() * t.element_size() for t in tensors.values())
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (out / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")
