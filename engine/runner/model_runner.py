"""Owns the model and its KV cache on the device; runs one scheduled step and samples."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from engine.checkpoint.model_config import ModelConfig
from engine.models.loader import load_model
from engine.runner.inputs import build_inputs
from engine.sampling.sampler import Logprob, SamplingState, sample
from engine.scheduler.output import SchedulerOutput

TORCH_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass
class StepResult:
    sampled: dict[str, int]  # request id -> token
    logprobs: dict[str, Logprob]
    logits: dict[str, torch.Tensor] | None = None  # only when the runner keeps logits (tests)


class ModelRunner:
    def __init__(
        self,
        model_dir: str | Path,
        cfg: ModelConfig,
        device: torch.device,
        dtype: torch.dtype,
        block_size: int,
        max_model_len: int,
        load_format: str = "auto",
        seed: int = 0,
    ) -> None:
        self.cfg = cfg
        self.device = device
        self.dtype = dtype
        self.block_size = block_size
        self.model = load_model(
            model_dir,
            cfg,
            dtype,
            device,
            max_position=max(max_model_len, 1),
            load_format=load_format,
            seed=seed,
        )
        self.num_blocks = 0
        self.keep_logits = False  # tests compare raw logits against transformers
        self._generators: dict[str, torch.Generator] = {}

    def allocate_kv_cache(self, num_blocks: int) -> None:
        shape = (num_blocks, self.block_size, self.cfg.num_kv_heads, self.cfg.head_dim)
        for attn in self.model.attention_layers():
            attn.k_cache = torch.zeros(shape, dtype=self.dtype, device=self.device)
            attn.v_cache = torch.zeros(shape, dtype=self.dtype, device=self.device)
        self.num_blocks = num_blocks

    def add_generator(self, request_id: str, seed: int) -> None:
        self._generators[request_id] = torch.Generator(device=self.device).manual_seed(seed)

    def drop_request(self, request_id: str) -> None:
        self._generators.pop(request_id, None)

    def execute(self, out: SchedulerOutput) -> StepResult:
        inputs = build_inputs(out, self.block_size, self.device)
        hidden = self.model(inputs.token_ids, inputs.positions, inputs.meta)
        if not inputs.sample_rows:
            return StepResult({}, {})
        logits = self.model.compute_logits(hidden[inputs.logits_indices])
        requests = [out.scheduled[i].request for i in inputs.sample_rows]
        result = self.sample(logits, requests)
        if self.keep_logits:
            result.logits = {r.request_id: logits[i].cpu() for i, r in enumerate(requests)}
        return result

    def sample(self, logits: torch.Tensor, requests: list) -> StepResult:
        states = []
        for request in requests:
            params = request.sampling_params
            banned = []
            if len(request.output_token_ids) < request.min_tokens:
                banned = sorted(
                    set(request.stop_token_ids) | (set() if request.ignore_eos else request.eos_token_ids)
                )
            states.append(
                SamplingState(
                    params=params,
                    generator=self._generators.get(request.request_id),
                    prompt_token_ids=request.prompt_token_ids,
                    output_token_ids=request.output_token_ids,
                    banned_token_ids=banned,
                )
            )
        token_ids, logprobs = sample(logits, states)
        ids = [r.request_id for r in requests]
        return StepResult(
            sampled=dict(zip(ids, token_ids, strict=True)),
            logprobs={rid: lp for rid, lp in zip(ids, logprobs, strict=True) if lp is not None},
        )
