"""Our engine against transformers on one checkpoint, greedy, fp32 on CPU: the same tokens and logits
within a relative 1e-4 (what every architecture's own test asks of its tiny checkpoint)."""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import AutoModelForCausalLM

from engine import LLM, SamplingParams


def assert_matches_transformers(
    model_dir: Path,
    prompt_lengths: tuple[int, ...] = (6, 29),
    new_tokens: int = 8,
    seed: int = 11,
    **engine_kwargs,
) -> LLM:
    """Random prompts of ``prompt_lengths`` tokens; ``engine_kwargs`` go to our LLM, which is returned
    (for checks on the built model)."""
    hf = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    hf.generation_config.eos_token_id = None  # full-length runs, as ours with ignore_eos
    gen = torch.Generator().manual_seed(seed)
    prompts = [torch.randint(3, hf.config.vocab_size, (n,), generator=gen).tolist() for n in prompt_lengths]
    llm = LLM(model_dir, device="cpu", dtype="float32", **engine_kwargs)
    llm.engine.runner.keep_logits = True
    outs = llm.generate(prompts, SamplingParams(max_tokens=new_tokens, temperature=0.0, ignore_eos=True))
    with torch.no_grad():
        for prompt, out in zip(prompts, outs, strict=True):
            full = hf.generate(
                torch.tensor([prompt]), max_new_tokens=new_tokens, do_sample=False, pad_token_id=0
            )
            assert out.token_ids == full[0, len(prompt) :].tolist(), f"{len(prompt)}-token prompt diverged"
            expected = hf(full).logits[0, len(prompt) - 1 : len(prompt) - 1 + new_tokens]
            ours = torch.stack(llm.engine.recorded_logits[out.request_id])
            rel = (ours - expected).abs().max() / expected.abs().max()
            assert rel < 1e-4, f"{len(prompt)}-token prompt: logits relative error {rel:.2e}"
    return llm
