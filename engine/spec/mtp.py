"""Drafts from the checkpoint's own multi-token-prediction (MTP / NextN) layer, DeepSeek-V3 style.

At position t the MTP layer reads the target's final hidden state h_t and the embedding of token
t+1, projects [enorm(embed), hnorm(h_t)] through ``eh_proj``, runs one decoder layer (latent
attention over its own paged KV cache, a mixture of experts) and predicts token t+2 through its
``shared_head``. Drafts longer than one chain the layer on itself: the next position reads the
layer's own output hidden state and the token it just drafted. The target's hidden states come
from the model runner's ``hidden_sink`` (every fed token's row, each step); as for the draft model,
a shadow request per target request counts only positions whose inputs were verified, so drafted
positions are recomputed once the target has verified them. Only the first MTP layer is used
(DeepSeek-V3 ships one). Positions whose hidden state the target never computed (a prefix-cache
hit) read zeros: the drafts get worse there, never wrong, since the target verifies them.
"""

from __future__ import annotations

from dataclasses import replace

import torch

from engine.config import CPU_MAX_DEFAULT_BLOCKS, EngineConfig
from engine.kv.kv_manager import KVCacheManager
from engine.layers.norm import RMSNorm
from engine.models.decoder import CausalLM
from engine.models.registry import kv_cache_specs
from engine.runner.inputs import build_inputs
from engine.scheduler.output import ScheduledRequest, SchedulerOutput
from engine.scheduler.request import Request
from engine.spec.proposer import Draft
from engine.spec.shadow import caught_up_shadow, scheduled_shadow

_OWN = ("enorm.", "hnorm.", "eh_proj.", "shared_head.", "embed_tokens.")


class MTPLayer(torch.nn.Module):
    """One held MTP layer of ``model`` as a module: its decoder layer, embedding and head live in a
    one-layer ``CausalLM`` (so the checkpoint's tensors load as the decoder's do)."""

    def __init__(self, model: CausalLM, index: int, max_position: int, device: torch.device) -> None:
        super().__init__()
        cfg = model.config
        held = model.mtp.layers[index]
        dtype = model.mtp.dtype
        moe = cfg.moe
        if moe is not None:
            moe = replace(moe, moe_layers=(any(name.startswith("mlp.experts.") for name in held),))
        one = replace(cfg, num_layers=1, num_mtp_layers=0, moe=moe, tie_word_embeddings=False)
        self.block = CausalLM(one, dtype, device, max_position)
        weights = [(f"model.layers.0.{name}", t) for name, t in held.items() if not name.startswith(_OWN)]
        weights.append(
            ("model.embed_tokens.weight", held.get("embed_tokens.weight", model.embed_tokens.weight))
        )
        weights.append(("model.norm.weight", held["shared_head.norm.weight"]))
        weights.append(("lm_head.weight", held.get("shared_head.head.weight", model.lm_head.weight)))
        self.block.load_weights(weights)
        self.enorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, dtype, device)
        self.hnorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, dtype, device)
        with torch.no_grad():
            self.enorm.weight.copy_(held["enorm.weight"])
            self.hnorm.weight.copy_(held["hnorm.weight"])
        self.eh_proj = held["eh_proj.weight"].to(device=device, dtype=dtype)

    @torch.inference_mode()
    def forward(self, token_ids, positions, prev_hidden, meta) -> torch.Tensor:
        """The layer's output hidden states (before the shared head's norm), one row per token."""
        embedded = self.block.embed_tokens(token_ids).masked_fill((positions == 0)[:, None], 0.0)
        x = torch.cat([self.enorm(embedded), self.hnorm(prev_hidden.to(embedded.dtype))], dim=-1)
        x, residual = self.block.layers[0](positions, x @ self.eh_proj.t(), None, meta)
        return x + residual

    @torch.inference_mode()
    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.block.compute_logits(self.block.norm(hidden))


class MTPProposer:
    def __init__(self, executor, config: EngineConfig, max_model_len: int) -> None:
        runner = getattr(executor, "local", executor)  # tensor parallel: rank 0's runner
        model = runner.model
        if not getattr(model, "mtp", None) or not model.mtp.layers:
            raise ValueError(
                "speculative_method mtp needs a checkpoint with MTP layers (num_nextn_predict_layers)"
            )
        self.device = runner.device
        self.block_size = config.block_size
        self.max_model_len = max_model_len
        self.layer = MTPLayer(model, 0, max_model_len, self.device)
        (spec,) = kv_cache_specs(
            self.layer.block.config, self.block_size, str(model.mtp.dtype).removeprefix("torch.")
        )
        per_seq = -(-max_model_len // self.block_size)
        num_blocks = max(per_seq, min(per_seq * config.max_num_seqs, CPU_MAX_DEFAULT_BLOCKS))
        (attention,) = self.layer.block.attention_layers()
        attention.bind_kv_cache(
            torch.zeros(spec.cache_shape(num_blocks), dtype=model.mtp.dtype, device=self.device)
        )
        self.kv = KVCacheManager(num_blocks, self.block_size, enable_caching=False)
        self._shadows: dict[str, Request] = {}
        # Per request, the target's hidden rows not yet read: (first position, rows).
        self._hidden: dict[str, list[tuple[int, torch.Tensor]]] = {}
        runner.hidden_sink = self._take_hidden

    def _take_hidden(self, out: SchedulerOutput, hidden: torch.Tensor) -> None:
        row = 0
        for s in out.scheduled:
            self._hidden.setdefault(s.request.request_id, []).append(
                (s.start, hidden[row : row + s.num_tokens])
            )
            row += s.num_tokens

    def _hidden_rows(self, rid: str, start: int, end: int, like: torch.Tensor) -> torch.Tensor:
        """The target's hidden states at positions [start, end), the latest written for each."""
        rows = torch.zeros((end - start, like.shape[-1]), dtype=like.dtype, device=like.device)
        for first, chunk in self._hidden.get(rid, []):
            lo, hi = max(first, start), min(first + chunk.shape[0], end)
            if lo < hi:
                rows[lo - start : hi - start] = chunk[lo - first : hi - first]
        return rows

    def propose(self, requests: list[Request], max_len: int) -> dict[str, Draft]:
        step, prev = [], []
        for request in requests:
            history = request.all_token_ids
            n = len(history)
            room = min(max_len, self.max_model_len - n)
            if n < 2 or room <= 0 or request.request_id not in self._hidden:
                continue
            shadow = self._shadow(request)
            start = min(shadow.num_computed_tokens, n - 2)  # MTP position t reads token t + 1
            if not self.kv.allocate_slots(shadow, start, n - 1 - start + room):
                self.drop(request.request_id)
                continue
            step.append(self._scheduled(shadow, start, history[start + 1 : n]))
            prev.append(
                self._hidden_rows(request.request_id, start, n - 1, self._any_chunk(request.request_id))
            )
        drafts: dict[str, Draft] = {}
        first = step
        while step:
            out = SchedulerOutput(scheduled=step)
            inputs = build_inputs(out, self.block_size, self.device, split_decode_rows=True)
            hidden = self.layer(inputs.token_ids, inputs.positions, torch.cat(prev), inputs.meta)
            last = hidden[inputs.logits_indices]
            probs = self.layer.logits(last).float().softmax(dim=-1)
            confidence, tokens = probs.max(dim=-1)
            following, prev = [], []
            for i, s in enumerate(step):
                rid = s.request.request_id
                draft = drafts.setdefault(rid, Draft([], [], calibrated=True))
                draft.token_ids.append(int(tokens[i]))
                draft.confidence.append(
                    (draft.confidence[-1] if draft.confidence else 1.0) * float(confidence[i])
                )
                position = s.start + s.num_tokens
                if len(draft.token_ids) < max_len and position < self.max_model_len - 1:
                    following.append(self._scheduled(s.request, position, [int(tokens[i])]))
                    prev.append(last[i : i + 1])
            step = following
        for s in first:
            shadow, rid = s.request, s.request.request_id
            n = shadow.num_tokens + 1
            shadow.num_computed_tokens = n - 2  # the last verified position is fed again next time
            # Keep only the target rows from that position on (the next step writes the rest).
            self._hidden[rid] = [(n - 2, self._hidden_rows(rid, n - 2, n - 1, self._any_chunk(rid)))]
        return drafts

    def _any_chunk(self, rid: str) -> torch.Tensor:
        return self._hidden[rid][0][1]

    def drop(self, request_id: str) -> None:
        self._hidden.pop(request_id, None)
        shadow = self._shadows.pop(request_id, None)
        if shadow is not None:
            self.kv.free(shadow)

    def _shadow(self, request: Request) -> Request:
        """The MTP side's sequence: the request's verified tokens from the second on."""
        return caught_up_shadow(self._shadows, request, self.max_model_len, skip=1)

    def _scheduled(self, shadow: Request, start: int, token_ids: list[int]) -> ScheduledRequest:
        return scheduled_shadow(self.kv, shadow, start, token_ids)
