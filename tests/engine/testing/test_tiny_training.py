"""A briefly trained tiny checkpoint: its held-out loss drops, its files keep their layout, and our
engine and transformers still read it alike (fp32, CPU)."""

from __future__ import annotations

import hashlib

import torch
from safetensors import safe_open
from transformers import AutoModelForCausalLM, AutoTokenizer

from engine import LLM, SamplingParams
from engine.testing.tiny_model import make_tiny_model
from engine.testing.tiny_training import corpus_split, heldout_prompts, train_tiny_model

NEW_TOKENS = 8


def _layout_and_values(model_dir) -> tuple[dict, dict]:
    layout, values = {}, {}
    for path in sorted(model_dir.glob("model*.safetensors")):
        with safe_open(str(path), framework="pt") as f:
            for name in f.keys():
                t = f.get_tensor(name)
                layout[name] = (path.name, t.dtype, tuple(t.shape))
                values[name] = t.clone()
    return layout, values


def test_training_lowers_heldout_loss_and_engine_still_matches_transformers(tmp_path):
    # Mistral, so prompts longer than its sliding window of 24 exercise the window; two shards, so
    # each file is rewritten with its own tensors.
    model_dir = make_tiny_model(tmp_path / "m", arch="mistral", seed=5, num_shards=2)
    layout_before, before = _layout_and_values(model_dir)
    lines: list[str] = []
    result = train_tiny_model(model_dir, 30, batch_size=8, seq_len=64, device="cpu", log=lines.append)

    assert result.heldout_loss < result.initial_heldout_loss - 0.5
    assert any("held-out loss" in line for line in lines)
    layout_after, after = _layout_and_values(model_dir)
    assert layout_after == layout_before
    assert all(not torch.equal(before[name], after[name]) for name in before if "proj" in name)

    prompts = heldout_prompts(model_dir, 3, seed=1, min_tokens=30, max_tokens=40)
    hf = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    hf.generation_config.eos_token_id = None
    with torch.no_grad():
        theirs = [
            hf.generate(torch.tensor([p]), max_new_tokens=NEW_TOKENS, do_sample=False, pad_token_id=0)[
                0, len(p) :
            ].tolist()
            for p in prompts
        ]
    llm = LLM(model_dir, device="cpu", dtype="float32")
    ours = llm.generate(prompts, SamplingParams(max_tokens=NEW_TOKENS, temperature=0.0, ignore_eos=True))
    assert [o.token_ids for o in ours] == theirs


def test_same_seed_same_bytes_and_the_checkpoint_dtype_is_kept(tmp_path):
    def trained(name: str, seed: int) -> str:
        model_dir = make_tiny_model(tmp_path / name, arch="qwen3", seed=0, dtype="bfloat16")
        train_tiny_model(model_dir, 3, seed=seed, batch_size=4, seq_len=32, device="cpu", log=lambda _: None)
        layout, _ = _layout_and_values(model_dir)
        assert {dtype for _, dtype, _ in layout.values()} == {torch.bfloat16}
        assert "lm_head.weight" not in layout  # qwen3's tied head stays tied
        return hashlib.sha256((model_dir / "model.safetensors").read_bytes()).hexdigest()

    first = trained("a", seed=0)
    assert trained("b", seed=0) == first
    assert trained("c", seed=1) != first


def test_prompts_come_from_heldout_text_and_depend_on_the_seed(tiny_qwen3):
    prompts = heldout_prompts(tiny_qwen3, 8, seed=0, min_tokens=10, max_tokens=20)
    assert len(prompts) == 8 and all(10 <= len(p) <= 20 for p in prompts)
    heldout = corpus_split(AutoTokenizer.from_pretrained(tiny_qwen3)).heldout.tolist()
    for p in prompts:
        assert any(heldout[i : i + len(p)] == p for i in range(len(heldout) - len(p) + 1))
    assert prompts == heldout_prompts(tiny_qwen3, 8, seed=0, min_tokens=10, max_tokens=20)
    assert prompts != heldout_prompts(tiny_qwen3, 8, seed=1, min_tokens=10, max_tokens=20)
