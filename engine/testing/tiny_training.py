"""Train a tiny checkpoint for a few hundred steps so that its next-token distributions are peaked.

Random tiny weights give nearly flat logits: in bf16 the top-2 margin is often below one rounding
step, so the order in which two correct kernels round decides greedy argmax. A few hundred steps of
next-token training on the tokenizer's own corpus (Python standard-library source) give a model
whose greedy choices are clear, as a real checkpoint's are, so engine-vs-transformers comparisons
in bf16 only disagree at true near-ties.

The checkpoint is loaded with ``transformers`` in float32, trained with AdamW (linear warmup, cosine
decay), and its safetensors files are rewritten in place: same files, tensor names and dtype.
"""

from __future__ import annotations

import math
import os
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F  # noqa: N812
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM, AutoTokenizer

from engine.testing.tiny_model import corpus_lines

# The token stream is cut into spans; every HELDOUT_EVERY-th span is held out, so held-out text
# comes from every corpus module rather than only from the last one.
SPAN_TOKENS = 1024
HELDOUT_EVERY = 10
# Weight of mean(logsumexp(logits)^2) added to the cross-entropy (as in PaLM): it pulls the top logits
# towards 0, where bf16 is finest. Teacher-forced on fp32 greedy paths (32 held-out prompts x 32
# tokens, 300 steps), bf16-vs-fp32 argmax flips went from 18/16/12 to 7/9/13 per 1,024 for
# llama/qwen3/mistral, and held-out loss fell too. Reported losses are plain cross-entropy.
Z_LOSS = 0.1


@dataclass(frozen=True)
class TrainingResult:
    steps: int
    initial_heldout_loss: float
    train_loss: float  # mean over a sample of training windows, measured after the last step
    heldout_loss: float


@dataclass(frozen=True)
class CorpusSplit:
    train: torch.Tensor  # 1-D token ids, training spans concatenated
    heldout: torch.Tensor  # 1-D token ids, held-out spans concatenated


def corpus_split(tokenizer) -> CorpusSplit:
    """The tokenizer's corpus as token ids, split into training and held-out text."""
    ids = tokenizer.encode("\n".join(corpus_lines()), add_special_tokens=False, verbose=False)
    spans = [ids[i : i + SPAN_TOKENS] for i in range(0, len(ids), SPAN_TOKENS)]
    train = [t for k, span in enumerate(spans) if k % HELDOUT_EVERY != HELDOUT_EVERY - 1 for t in span]
    heldout = [t for k, span in enumerate(spans) if k % HELDOUT_EVERY == HELDOUT_EVERY - 1 for t in span]
    if not heldout:
        raise ValueError(f"corpus of {len(ids)} tokens is too short to hold out a span")
    return CorpusSplit(torch.tensor(train), torch.tensor(heldout))


def heldout_prompts(
    model_dir: str | Path, count: int, seed: int = 0, min_tokens: int = 8, max_tokens: int = 48
) -> list[list[int]]:
    """``count`` prompts (token ids) cut at seeded random places from the held-out text."""
    heldout = corpus_split(AutoTokenizer.from_pretrained(model_dir)).heldout
    gen = torch.Generator().manual_seed(seed)
    prompts = []
    for _ in range(count):
        length = int(torch.randint(min_tokens, max_tokens + 1, (), generator=gen))
        start = int(torch.randint(0, len(heldout) - length, (), generator=gen))
        prompts.append(heldout[start : start + length].tolist())
    return prompts


def train_tiny_model(
    model_dir: str | Path,
    steps: int,
    *,
    seed: int = 0,
    batch_size: int = 32,
    seq_len: int = 128,
    lr: float = 1e-2,
    device: str | None = None,
    log_every: int = 50,
    log: Callable[[str], None] | None = None,
    z_loss: float = Z_LOSS,
) -> TrainingResult:
    """Train the checkpoint in ``model_dir`` for ``steps`` AdamW steps of ``batch_size`` random
    training windows of ``seq_len`` tokens, and rewrite its weights.

    Deterministic given ``seed`` on CPU; on CUDA deterministic algorithms are requested too.
    ``device`` defaults to CUDA when available. ``log`` gets a progress line every ``log_every``
    steps (default: stderr)."""
    if steps < 1 or batch_size < 1 or seq_len < 2:
        raise ValueError(
            f"need steps >= 1, batch_size >= 1, seq_len >= 2; got {steps}, {batch_size}, {seq_len}"
        )
    log = log or _log_to_stderr
    dev = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    split = corpus_split(AutoTokenizer.from_pretrained(model_dir))
    if len(split.heldout) < seq_len + 1 or len(split.train) < seq_len + 1:
        raise ValueError(f"seq_len {seq_len} is longer than the held-out text ({len(split.heldout)} tokens)")
    train, heldout = split.train.to(dev), split.heldout.to(dev)
    gen = torch.Generator().manual_seed(seed)
    with _deterministic(dev):
        # Eager attention: its backward is deterministic, and the model is too small for it to cost.
        model = AutoModelForCausalLM.from_pretrained(
            model_dir, dtype=torch.float32, attn_implementation="eager"
        ).to(dev)
        eval_rows = _rows(heldout, seq_len)
        train_rows = _evenly_spaced_windows(train, seq_len, len(eval_rows))
        initial = _mean_loss(model, eval_rows, batch_size)
        log(f"training {model_dir} on {dev.type}: {steps} steps, held-out loss {initial:.3f} at start")
        optimizer = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=0.01)
        schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, _warmup_cosine(steps))
        window = torch.arange(seq_len + 1, device=dev)
        model.train()
        for step in range(1, steps + 1):
            starts = torch.randint(0, len(train) - seq_len, (batch_size, 1), generator=gen).to(dev)
            loss, log_z = _losses(model, train[starts + window])
            (loss + z_loss * log_z.pow(2).mean()).backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            schedule.step()
            optimizer.zero_grad(set_to_none=True)
            if step % log_every == 0 or step == steps:
                log(f"step {step}/{steps} loss {loss.item():.3f} lr {schedule.get_last_lr()[0]:.2e}")
        result = TrainingResult(
            steps=steps,
            initial_heldout_loss=initial,
            train_loss=_mean_loss(model, train_rows, batch_size),
            heldout_loss=_mean_loss(model, eval_rows, batch_size),
        )
    _save_like_checkpoint(model, Path(model_dir))
    log(
        f"trained {steps} steps: train loss {result.train_loss:.3f}, held-out loss {result.heldout_loss:.3f} "
        f"(was {result.initial_heldout_loss:.3f}; uniform over the vocabulary would be "
        f"{math.log(model.config.vocab_size):.3f})"
    )
    return result


def _warmup_cosine(steps: int) -> Callable[[int], float]:
    warmup = max(1, steps // 10)

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        progress = (step - warmup) / max(1, steps - warmup)
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress))  # decays to a tenth of the peak

    return factor


def _losses(model, batch: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean next-token cross-entropy over ``batch`` rows, and the log-partition at every position."""
    logits = model(input_ids=batch[:, :-1]).logits.float()
    ce = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1))
    return ce, logits.logsumexp(-1)


def _rows(tokens: torch.Tensor, seq_len: int) -> torch.Tensor:
    """Non-overlapping windows of ``seq_len + 1`` tokens (inputs plus the shifted targets)."""
    n = (len(tokens) - 1) // seq_len
    return torch.stack([tokens[i * seq_len : i * seq_len + seq_len + 1] for i in range(n)])


def _evenly_spaced_windows(tokens: torch.Tensor, seq_len: int, count: int) -> torch.Tensor:
    last = len(tokens) - seq_len - 1
    starts = [round(k * last / max(1, count - 1)) for k in range(count)]
    return torch.stack([tokens[s : s + seq_len + 1] for s in starts])


def _mean_loss(model, rows: torch.Tensor, batch_size: int) -> float:
    was_training = model.training
    model.eval()
    total = 0.0
    with torch.no_grad():
        for i in range(0, len(rows), batch_size):
            chunk = rows[i : i + batch_size]
            total += _losses(model, chunk)[0].item() * len(chunk)
    model.train(was_training)
    return total / len(rows)


def _save_like_checkpoint(model, model_dir: Path) -> None:
    """Rewrite every safetensors file of ``model_dir`` with the trained values, keeping each file's
    tensor names and dtypes (a tied ``lm_head`` stays absent, shards stay shards). Layers past the
    decoder's (DeepSeek-V3's multi-token-prediction layer), which transformers does not load, keep
    their stored values."""
    trained = _hub_named_tensors(model)
    files = sorted(model_dir.glob("model*.safetensors"))
    if not files:
        raise FileNotFoundError(f"no model*.safetensors in {model_dir}")
    decoder_layers = model.config.num_hidden_layers
    for path in files:
        with safe_open(str(path), framework="pt") as f:
            metadata = f.metadata()
            stored = {name: f.get_tensor(name) for name in f.keys()}
        beyond = {
            name for name in stored if _layer_index(name) is not None and _layer_index(name) >= decoder_layers
        }
        missing = [name for name in stored if name not in trained and name not in beyond]
        if missing:
            raise KeyError(f"{path.name}: transformers' model has no tensor {missing[0]!r}")
        tensors = {
            name: (tensor if name in beyond else trained[name].to(tensor.dtype)).contiguous()
            for name, tensor in stored.items()
        }
        save_file(tensors, str(path), metadata=metadata)


def _hub_named_tensors(model) -> dict[str, torch.Tensor]:
    """The model's tensors on the CPU under the checkpoint's names: ``save_pretrained`` undoes the
    conversions transformers makes on load (per-expert projections fused into one tensor, say)."""
    with tempfile.TemporaryDirectory() as tmp:
        model.save_pretrained(tmp)
        tensors: dict[str, torch.Tensor] = {}
        for path in Path(tmp).glob("*.safetensors"):
            tensors.update(load_file(str(path)))
    return tensors


def _layer_index(name: str) -> int | None:
    parts = name.split(".")
    if len(parts) > 2 and parts[:2] == ["model", "layers"] and parts[2].isdigit():
        return int(parts[2])
    return None


@contextmanager
def _deterministic(device: torch.device) -> Iterator[None]:
    if device.type != "cuda":
        yield
        return
    # cuBLAS is only deterministic with a fixed workspace; it must be set before its first use.
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    before = (
        torch.are_deterministic_algorithms_enabled(),
        torch.is_deterministic_algorithms_warn_only_enabled(),
    )
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(before[0], warn_only=before[1])


def _log_to_stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)
