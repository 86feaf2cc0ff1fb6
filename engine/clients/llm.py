"""Offline batch inference: ``LLM(model_dir).generate(prompts, SamplingParams(...))``.

``LLM`` is an ``EngineClient`` through ``LLM.client`` rather than by its own methods: its
``generate(prompts, params) -> list`` is the vLLM-style batch API that scripts, benchmarks and tests
call, while ``EngineClient.generate(prompt, params, request_id, cache_salt)`` streams one request
asynchronously. One class cannot offer both under one name, and renaming either would break its
callers, so the LLM holds an ``InlineEngineClient`` over its own core, and both APIs run the same
admission and the same drive loop (``llm.client`` is what to hand to code written against the
Protocol, for example ``create_app``). ``llm.engine`` stays the ``EngineCore`` itself.
"""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path
from typing import Any

from engine.clients.inline import InlineEngineClient
from engine.config import EngineConfig
from engine.core.engine_core import EngineCore
from engine.outputs import GenerationOutput, RequestOutput
from engine.sampling.params import SamplingParams

Prompt = str | list[int]


class LLM:
    def __init__(self, model_dir: str | Path, **overrides: Any) -> None:
        """``overrides``: any ``EngineConfig`` field; the rest keep EngineConfig's defaults."""
        self.config = EngineConfig(model_dir=model_dir, **overrides)
        self.engine = EngineCore(self.config)
        self.tokenizer = self.engine.tokenizer
        self.client = InlineEngineClient(self.engine)

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
        return [_generation_output(out) for out in self.client.run_batch(prompts, params)]

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


def _generation_output(out: RequestOutput) -> GenerationOutput:
    """A final-only output as ``generate`` returns it: the fields both share, and its logprobs (a
    final-only output's ``new_logprobs`` are the whole request's)."""
    shared = {f.name: getattr(out, f.name) for f in fields(GenerationOutput) if hasattr(out, f.name)}
    return GenerationOutput(**shared, logprobs=out.new_logprobs)
