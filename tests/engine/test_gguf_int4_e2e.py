"""The real SmolLM2-135M-Instruct GGUF served with its Q4_1 projections kept 4-bit on the CPU
(``gguf_weights="int4"``): bfloat16 still knows the capital of France, float32 (the kernel's exact
path) gives dequantize's greedy tokens, and batch-invariant mode refuses the combination."""

import pytest

from engine import LLM, SamplingParams
from engine.config import EngineConfig
from engine.layers.int4_weight import PackedInt4Weight
from engine.testing.smollm2 import smollm2_path

GREEDY = SamplingParams(max_tokens=16, temperature=0.0)


def test_int4_bfloat16_knows_the_capital_of_france():
    """A completion whose answer leads by ~2.5 nats. Not the chat question: its first token is a
    near-tie even in float32 ("The" over "L" by 0.08 nats), which the 4-bit bfloat16 model broke
    toward "L'Étoile" on one CPU type (Zen 4, AVX-512 BF16) and toward "The capital ... Paris" on
    another (Sapphire Rapids, AMX)."""
    llm = LLM(str(smollm2_path()), device="cpu", dtype="bfloat16", gguf_weights="int4")
    packed = [m for m in llm.engine.runner.model.modules() if isinstance(getattr(m, "weight", None), PackedInt4Weight)]
    assert len(packed) == 30 * 4  # q/k/v, o, gate/up and down in every layer
    out = llm.generate(["The capital of France is"], SamplingParams(max_tokens=4, temperature=0.0, logprobs=2))[0]
    assert out.text.startswith(" Paris")
    first = out.logprobs[0].top
    assert first[0][1] - first[1][1] > 1.0  # a clear lead, not a near-tie


def test_int4_float32_gives_the_dequantized_greedy_tokens():
    prompts = ["The capital of France is", "def fibonacci(n):"]
    dense = LLM(str(smollm2_path()), device="cpu", dtype="float32").generate(prompts, GREEDY)
    kept = LLM(str(smollm2_path()), device="cpu", dtype="float32", gguf_weights="int4").generate(prompts, GREEDY)
    assert [o.token_ids for o in kept] == [o.token_ids for o in dense]


def test_int4_is_refused_in_batch_invariant_mode():
    with pytest.raises(ValueError, match="gguf_weights int4 is not batch-invariant"):
        LLM(str(smollm2_path()), device="cpu", gguf_weights="int4", batch_invariant=True)


def test_gguf_weights_choices_are_checked():
    with pytest.raises(ValueError, match="gguf_weights must be one of dequantize, int4"):
        EngineConfig(model_dir=str(smollm2_path()), gguf_weights="int8")
