"""Owns the model and its KV cache on the device; runs one scheduled step and samples."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from engine.checkpoint.model_config import ModelConfig
from engine.distributed.group import SINGLE, TPGroup
from engine.models.loader import load_model
from engine.runner.cuda_graphs import DecodeGraphs
from engine.runner.inputs import build_inputs
from engine.sampling.sampler import Logprob, SamplingState, greedy_only, sample, sample_greedy
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
        tp_group: TPGroup = SINGLE,
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
            tp_group=tp_group,
        )
        self.num_blocks = 0
        self.keep_logits = False  # tests compare raw logits against transformers
        self.samples = True  # False on tensor-parallel ranks > 0: they run the model, rank 0 samples
        self._generators: dict[str, torch.Generator] = {}
        self.max_model_len = max_model_len
        self.graphs: DecodeGraphs | None = None
        # Benchmarks set this to a list to get (start, end) CUDA events around each step's GPU work.
        self.step_events: list[tuple[torch.cuda.Event, torch.cuda.Event]] | None = None

    def allocate_kv_cache(self, num_blocks: int) -> None:
        for attn in self.model.attention_layers():  # this rank's KV heads (tensor parallel)
            shape = (num_blocks, self.block_size, attn.num_kv_heads, attn.head_dim)
            attn.k_cache = torch.zeros(shape, dtype=self.dtype, device=self.device)
            attn.v_cache = torch.zeros(shape, dtype=self.dtype, device=self.device)
        self.num_blocks = num_blocks

    def capture_decode_graphs(self, max_batch: int, eager: bool = False) -> None:
        """Capture decode steps up to ``max_batch`` requests as CUDA graphs (after the KV cache
        exists). ``eager``: same static-buffer path replayed without graphs (any device; tests)."""
        if self.device.type != "cuda" and not eager:
            raise ValueError("CUDA graphs need a CUDA device")
        max_blocks = -(-self.max_model_len // self.block_size)
        graphs = DecodeGraphs(self.model, max_batch, max_blocks, self.block_size, self.device)
        if eager:
            graphs.use_eager()
        else:
            graphs.capture()
        self.graphs = graphs

    def add_generator(self, request_id: str, seed: int) -> None:
        self._generators[request_id] = torch.Generator(device=self.device).manual_seed(seed)

    def drop_request(self, request_id: str) -> None:
        self._generators.pop(request_id, None)

    def execute(self, out: SchedulerOutput) -> StepResult:
        if self.step_events is None or self.device.type != "cuda":
            return self._execute(out)
        result = self._execute(out)
        end = torch.cuda.Event(enable_timing=True)
        end.record()
        self.step_events.append((self._step_start, end))
        return result

    def _gpu_work_begins(self) -> None:
        """Mark where this step first queues GPU work (host-side input building comes before)."""
        if self.step_events is not None and self.device.type == "cuda":
            self._step_start = torch.cuda.Event(enable_timing=True)
            self._step_start.record()

    def _execute(self, out: SchedulerOutput) -> StepResult:
        if self.graphs is not None and self.graphs.can_run(out):
            logits = self.graphs.run(out, self._gpu_work_begins)
            return self._sample_step(logits, [s.request for s in out.scheduled])
        inputs = build_inputs(out, self.block_size, self.device, self._gpu_work_begins)
        hidden = self.model(inputs.token_ids, inputs.positions, inputs.meta)
        if not inputs.sample_rows:
            return StepResult({}, {})
        logits = self.model.compute_logits(hidden[inputs.logits_indices])
        return self._sample_step(logits, [out.scheduled[i].request for i in inputs.sample_rows])

    def _sample_step(self, logits: torch.Tensor, requests: list) -> StepResult:
        if not self.samples:
            return StepResult({}, {})
        if greedy_only(requests):
            ids = [r.request_id for r in requests]
            result = StepResult(dict(zip(ids, sample_greedy(logits), strict=True)), {})
        else:
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
