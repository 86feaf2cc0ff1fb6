"""Offline batch inference: ``LLM(model_dir).generate(prompts, SamplingParams(...))``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from engine.config import EngineConfig
from engine.core.engine_core import EngineCore
from engine.outputs import GenerationOutput, Logprob
from engine.sampling.params import SamplingParams

Prompt = str | list[int]


class LLM:
    def __init__(
        self,
        model_dir: str | Path,
        device: str = "cpu",
        dtype: str = "float32",
        block_size: int = 16,
        max_num_batched_tokens: int = 2048,
        enable_prefix_caching: bool = True,
        num_gpu_blocks: int | None = None,
        **kwargs: Any,
    ) -> None:
        self.config = EngineConfig(
            model_dir=model_dir,
            device=device,
            dtype=dtype,
            block_size=block_size,
            max_num_batched_tokens=max_num_batched_tokens,
            enable_prefix_caching=enable_prefix_caching,
            num_gpu_blocks=num_gpu_blocks,
            **kwargs,
        )
        self.engine = EngineCore(self.config)
        self.tokenizer = self.engine.tokenizer
        self._counter = 0

    def generate(
        self, prompts: Prompt | list[Prompt], params: SamplingParams | list[SamplingParams] | None = None
    ) -> list[GenerationOutput]:
        """Run every prompt to completion; outputs come back in prompt order."""
        if isinstance(prompts, str) or (
            isinstance(prompts, list) and prompts and isinstance(prompts[0], int)
        ):
            prompts = [prompts]
        prompts = list(prompts)
        params = params if params is not None else SamplingParams()
        if isinstance(params, SamplingParams):
            params = [params] * len(prompts)
        if len(params) != len(prompts):
            raise ValueError(f"got {len(params)} SamplingParams for {len(prompts)} prompts")
        # Validate everything before admitting anything, so a bad prompt leaves no half-run batch.
        prepared = [
            self.engine.prepare(p, sp, request_id=self._next_id(), final_only=True)
            for p, sp in zip(prompts, params, strict=True)
        ]
        order = [p.request.request_id for p in prepared]
        for p in prepared:
            self.engine.add(p)
        finished: dict[str, GenerationOutput] = {}
        logprobs: dict[str, list[Logprob]] = {}
        while self.engine.has_unfinished():
            for out in self.engine.step():
                if out.new_logprobs is not None:
                    logprobs.setdefault(out.request_id, []).extend(out.new_logprobs)
                if out.finished:
                    finished[out.request_id] = GenerationOutput(
                        request_id=out.request_id,
                        prompt_token_ids=out.prompt_token_ids,
                        token_ids=out.token_ids,
                        text=out.text,
                        finish_reason=out.finish_reason,
                        stop_reason=out.stop_reason,
                        num_cached_tokens=out.num_cached_tokens,
                        logprobs=logprobs.pop(out.request_id, None) if out.new_logprobs is not None else None,
                        metrics=out.metrics,
                    )
        return [finished[rid] for rid in order]

    def chat(
        self,
        conversations: list[dict] | list[list[dict]],
        params: SamplingParams | list[SamplingParams] | None = None,
        tools: list[dict] | None = None,
        add_generation_prompt: bool = True,
    ) -> list[GenerationOutput]:
        """Apply the checkpoint's chat template to each conversation, then generate."""
        if conversations and isinstance(conversations[0], dict):
            conversations = [conversations]
        prompts = [
            self.tokenizer.encode_chat(c, tools=tools, add_generation_prompt=add_generation_prompt)
            for c in conversations
        ]
        return self.generate(prompts, params)

    def stats(self):
        return self.engine.stats()

    def shutdown(self) -> None:
        """Stop the other tensor-parallel ranks' processes (nothing to do at tensor_parallel_size=1)."""
        self.engine.shutdown()

    def __enter__(self) -> LLM:
        return self

    def __exit__(self, *exc_info) -> None:
        self.shutdown()

    def _next_id(self) -> str:
        self._counter += 1
        return f"llm-{self._counter}"
