"""Drafts from a small model with the target's tokenizer (e.g. SmolLM2-135M for a larger Llama).

The draft model has its own model runner and paged KV cache on the target's device. Each request
keeps a shadow request there whose tokens are the target's verified tokens: a proposal feeds the
tokens the shadow has not computed yet (the whole prompt the first time, then the tokens the last
step verified), then drafts greedily one token per forward for all requests at once. The draft
tokens' KV is never counted as computed, so the next proposal recomputes whatever was accepted and
overwrites what was rejected. Confidence: the cumulative product of the draft's softmax maximum.
"""

from __future__ import annotations

import torch

from engine.checkpoint.model_config import load_model_config
from engine.config import CPU_MAX_DEFAULT_BLOCKS, EngineConfig
from engine.kv.kv_manager import KVCacheManager
from engine.runner.model_runner import TORCH_DTYPES, ModelRunner
from engine.scheduler.output import ScheduledRequest, SchedulerOutput
from engine.scheduler.request import Request
from engine.spec.proposer import Draft
from engine.spec.shadow import caught_up_shadow, scheduled_shadow


class DraftModelProposer:
    def __init__(
        self, config: EngineConfig, target_vocab_size: int, device: torch.device, max_model_len: int
    ):
        cfg = load_model_config(config.speculative_model)
        if cfg.vocab_size != target_vocab_size:
            raise ValueError(
                f"the draft model's vocabulary ({cfg.vocab_size}) is not the target's ({target_vocab_size}): "
                "a draft model must share the target's tokenizer"
            )
        dtype = TORCH_DTYPES[cfg.dtype if config.dtype == "auto" else config.dtype]
        self.max_model_len = min(max_model_len, cfg.max_position_embeddings)
        self.runner = ModelRunner(
            config.speculative_model,
            cfg,
            device,
            dtype,
            config.block_size,
            self.max_model_len,
            load_format=config.load_format,
            gguf_weights=config.gguf_weights,
            seed=config.seed,
        )
        self.runner.keep_logits = True  # the confidence is read from the logits
        per_seq = -(-self.max_model_len // config.block_size)
        num_blocks = max(per_seq, min(per_seq * config.max_num_seqs, CPU_MAX_DEFAULT_BLOCKS))
        self.runner.allocate_kv_cache(num_blocks)
        self.kv = KVCacheManager(num_blocks, config.block_size, enable_caching=False)
        self._shadows: dict[str, Request] = {}

    def propose(self, requests: list[Request], max_len: int) -> dict[str, Draft]:
        first = []
        for request in requests:
            history = request.all_token_ids
            room = min(max_len, self.max_model_len - len(history))
            shadow = self._shadow(request)
            start = shadow.num_computed_tokens
            if room <= 0 or not self.kv.allocate_slots(shadow, start, len(history) - start + room):
                self.drop(request.request_id)  # no room: this request goes without a draft
                continue
            first.append(self._scheduled(shadow, start, history[start:]))
        drafts: dict[str, Draft] = {}
        step = first
        for _ in range(max_len):
            if not step:
                break
            result = self.runner.execute(SchedulerOutput(scheduled=step))
            following = []
            for s in step:
                rid = s.request.request_id
                token = result.sampled[rid]
                confidence = float(result.logits[rid].softmax(dim=-1)[token])
                draft = drafts.setdefault(rid, Draft([], [], calibrated=True))
                cumulative = (draft.confidence[-1] if draft.confidence else 1.0) * confidence
                draft.token_ids.append(token)
                draft.confidence.append(cumulative)
                position = s.start + s.num_tokens
                if len(draft.token_ids) < max_len and position < self.max_model_len - 1:
                    following.append(self._scheduled(s.request, position, [token]))
            step = following
        for request in requests:
            shadow = self._shadows.get(request.request_id)
            if shadow is not None:
                # Verified tokens only; the last one is fed again, so a proposal always has a row
                # to read its first draft token from.
                shadow.num_computed_tokens = shadow.num_tokens - 1
        return {rid: d for rid, d in drafts.items() if d.token_ids}

    def drop(self, request_id: str) -> None:
        shadow = self._shadows.pop(request_id, None)
        if shadow is not None:
            self.kv.free(shadow)

    def _shadow(self, request: Request) -> Request:
        """The draft side's copy of the request, caught up with its verified tokens."""
        return caught_up_shadow(self._shadows, request, self.max_model_len)

    def _scheduled(self, shadow: Request, start: int, token_ids: list[int]) -> ScheduledRequest:
        return scheduled_shadow(self.kv, shadow, start, token_ids)
