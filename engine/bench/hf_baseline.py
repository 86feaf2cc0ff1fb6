"""The Hugging Face ``transformers`` baseline (eager ``generate``), run on the same shapes and device."""

from __future__ import annotations

import time
from dataclasses import dataclass


@dataclass(frozen=True)
class GenerateResult:
    batch_size: int
    prompt_len: int
    output_len: int
    seconds: float

    @property
    def output_tokens_per_s(self) -> float:
        return self.batch_size * self.output_len / self.seconds


def build_hf_model(config: dict, device: str = "cuda", dtype: str = "bfloat16", seed: int = 0):
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    torch.manual_seed(seed)
    hf_config = AutoConfig.for_model(**{k: v for k, v in config.items() if k != "architectures"})
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(hf_config, dtype=getattr(torch, dtype))
    return model.eval()


def load_hf_model(path, device: str = "cuda", dtype: str = "bfloat16"):
    """The checkpoint's own weights: a Hugging Face directory, or a GGUF file that transformers
    dequantizes itself (its GGUF reader, not ours: the baseline shares no loading code with us)."""
    from pathlib import Path

    import torch
    from transformers import AutoModelForCausalLM

    path = Path(path)
    kwargs = {"gguf_file": path.name} if path.is_file() else {}
    directory = path.parent if path.is_file() else path
    model = AutoModelForCausalLM.from_pretrained(directory, dtype=getattr(torch, dtype), **kwargs)
    return model.to(device).eval()


def _sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def time_generate(
    model, batch_size: int, prompt_len: int, output_len: int, device: str = "cuda", seed: int = 0
):
    import torch

    generator = torch.Generator(device="cpu").manual_seed(seed)
    vocab = model.config.vocab_size
    input_ids = torch.randint(0, vocab, (batch_size, prompt_len), generator=generator).to(device)
    attention_mask = torch.ones_like(input_ids)
    kwargs = dict(
        attention_mask=attention_mask,
        max_new_tokens=output_len,
        min_new_tokens=output_len,
        do_sample=False,
        pad_token_id=0,
    )
    with torch.inference_mode():
        model.generate(
            input_ids[:, : min(prompt_len, 16)],
            attention_mask=attention_mask[:, :16],
            max_new_tokens=4,
            min_new_tokens=4,
            do_sample=False,
            pad_token_id=0,
        )  # warm-up
        _sync(device)
        started = time.perf_counter()
        out = model.generate(input_ids, **kwargs)
        _sync(device)
        seconds = time.perf_counter() - started
    assert out.shape[1] == prompt_len + output_len, out.shape
    return GenerateResult(batch_size, prompt_len, output_len, seconds)


def time_prefill(model, prompt_len: int, device: str = "cuda", repeats: int = 3, seed: int = 0) -> float:
    """Median seconds for one forward pass over a prompt (logits for the last position only)."""
    import torch

    generator = torch.Generator(device="cpu").manual_seed(seed)
    input_ids = torch.randint(0, model.config.vocab_size, (1, prompt_len), generator=generator).to(device)
    times = []
    with torch.inference_mode():
        for i in range(repeats + 1):
            _sync(device)
            started = time.perf_counter()
            model(input_ids, use_cache=False, logits_to_keep=1)
            _sync(device)
            if i:  # the first pass is warm-up
                times.append(time.perf_counter() - started)
    times.sort()
    return times[len(times) // 2]
