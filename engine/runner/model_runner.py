"""Owns the model and its KV cache on the device; runs one scheduled step and samples."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from engine.checkpoint.model_config import ModelConfig
from engine.distributed.expert_balancer import ExpertBalancer, ExpertBalancerSettings
from engine.distributed.expert_parallel import ExpertParallelLayout, building_expert_parallel
from engine.distributed.group import SINGLE, TPGroup
from engine.kv.specs import KVCacheSpec, shared_block_size
from engine.layers import moe
from engine.layers.batch_invariant import batch_invariant
from engine.models.loader import load_model
from engine.models.registry import kv_cache_specs
from engine.runner.cuda_graphs import DecodeGraphs
from engine.runner.host_copy import to_device
from engine.runner.inputs import build_inputs
from engine.runner.invariant_tiles import verify_tile_table
from engine.runner.moe_graphs import MoEBlockGraphs, graphable_moe_layers
from engine.sampling.sampler import (
    Logprob,
    SamplingState,
    choose_tokens,
    greedy_only,
    num_outputs_before,
    sample,
)
from engine.sampling.verify import verify_draft, verify_forced
from engine.scheduler.output import SchedulerOutput
from engine.structured.bitmask import GrammarMasks, apply_draft_grammars, apply_grammars

if TYPE_CHECKING:
    from engine.spec.forced_acceptance import ForcedAcceptance

TORCH_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}

log = logging.getLogger("chassis.runner")


@dataclass
class StepResult:
    sampled: dict[str, int]  # request id -> token
    logprobs: dict[str, Logprob]
    logits: dict[str, torch.Tensor] | None = None  # only when the runner keeps logits (tests)
    # Speculative decoding: per speculating request, the verified draft tokens before ``sampled``.
    accepted: dict[str, list[int]] = field(default_factory=dict)


class LaunchedStep:
    """A step whose GPU work is queued; ``result()`` waits for its sampled ids (the only host sync).

    The ids are copied to pinned host memory behind an event as soon as they are queued, so by the
    time the host asks (one step later with async scheduling) they are usually there already."""

    def __init__(self, request_ids: list[str], ids: torch.Tensor | None, done: StepResult | None) -> None:
        self.request_ids = request_ids
        self._done = done
        self._event = None
        self._host_ids = None
        if done is None and ids is not None:
            if ids.device.type == "cuda":
                self._host_ids = ids.to("cpu", non_blocking=True)
                self._event = torch.cuda.Event()
                self._event.record()
            else:
                self._host_ids = ids

    def result(self) -> StepResult:
        if self._done is None:
            if self._event is not None:
                self._event.synchronize()
            ids = self._host_ids.tolist() if self._host_ids is not None else []
            self._done = StepResult(dict(zip(self.request_ids, ids, strict=True)), {})
        return self._done


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
        gguf_weights: str = "dequantize",
        seed: int = 0,
        tp_group: TPGroup = SINGLE,
        expert_parallel: bool = False,
        expert_balancer: ExpertBalancerSettings | None = None,
    ) -> None:
        """``expert_parallel``: ``tp_group`` is an expert-parallel group instead: the model is whole on
        every rank but its routed experts, and each rank runs attention for its own requests (the
        ones whose KV blocks its pool holds, ``engine/kv/data_parallel.py``)."""
        self.cfg = cfg
        self.ep_group = tp_group if expert_parallel and not tp_group.is_single else None
        self.group = tp_group  # whom rank 0's samples are broadcast to
        self.tp_group = SINGLE if expert_parallel else tp_group
        self.device = device
        self.dtype = dtype
        self.block_size = block_size
        layout = None
        if self.ep_group is not None:
            extra = expert_balancer.extra_slots if expert_balancer is not None else 0
            layout = ExpertParallelLayout(self.ep_group, extra)
        with building_expert_parallel(layout):
            self.model = load_model(
                model_dir,
                cfg,
                dtype,
                device,
                max_position=max(max_model_len, 1),
                load_format=load_format,
                gguf_weights=gguf_weights,
                seed=seed,
                tp_group=self.tp_group,
            )
        if batch_invariant():  # before warm-up or graph capture runs a product
            verify_tile_table(self.model)
        self.balancer = None
        if self.ep_group is not None and expert_balancer is not None:
            self.balancer = ExpertBalancer(self.model, self.ep_group, expert_balancer)
        self.num_blocks = 0
        self.num_window_blocks = 0
        self.keep_logits = False  # tests compare raw logits against transformers
        self.samples = True  # False on tensor-parallel ranks > 0: they run the model, rank 0 samples
        self._generators: dict[str, torch.Generator] = {}
        self.max_model_len = max_model_len
        self.graphs: DecodeGraphs | None = None
        self.moe_graphs: MoEBlockGraphs | None = None
        # Benchmarks set this to a list to get (start, end) CUDA events around each step's GPU work.
        self.step_events: list[tuple[torch.cuda.Event, torch.cuda.Event]] | None = None
        # The last step's sampled ids on the device and each request's row in them: the next step
        # feeds a decode request's pending token from there (async scheduling).
        self._prev_ids: torch.Tensor | None = None
        self._prev_rows: dict[str, int] = {}
        # Speculative decoding's MTP proposer reads every step's final hidden states (one row per fed
        # token, in the step's order); while set, steps take the plain path (the decode graphs
        # output logits only).
        self.hidden_sink: Callable[[SchedulerOutput, torch.Tensor], None] | None = None
        # Benchmarks only (engine/bench/speculative_grid.py installs it; no setting reaches it):
        # replaces the verification's accept/reject decision by one of known rate, same GPU work.
        self.acceptance_override: ForcedAcceptance | None = None
        self.grammar_masks = GrammarMasks(device)
        self._before_sampling: Callable[[], None] | None = None

    def allocate_kv_cache(self, num_blocks: int, num_window_blocks: int = 0) -> None:
        """One tensor per layer, shaped by the layer's KV spec (this rank's KV heads), of
        ``num_blocks`` pages, or of ``num_window_blocks`` for a sliding-window layer when set (the
        window group's own pool, engine/kv/layout.py)."""
        specs = self.kv_cache_specs()
        layers = self.model.attention_layers()
        if len(specs) != len(layers):
            raise ValueError(f"{len(specs)} KV cache specs for {len(layers)} attention layers")
        if shared_block_size(specs) != self.block_size:  # every layer is indexed by one block table
            raise ValueError(f"KV specs use blocks of {specs[0].block_size} tokens, not {self.block_size}")
        caches: list[torch.Tensor] = []
        # A slot is written before anything attends to it. On an accelerator the pool is zeroed
        # anyway (its allocator hands out used memory); on the CPU a pool this large is fresh pages
        # from the kernel, and zeroing them would make the whole pool resident at start (3 GB for
        # SmolLM2's default) instead of as blocks fill.
        allocate = torch.empty if self.device.type == "cpu" else torch.zeros
        for i, (attn, spec) in enumerate(zip(layers, specs, strict=True)):
            if getattr(spec, "window", None) != attn.sliding_window:
                raise ValueError(f"layer {i}: KV spec {spec} does not match its window {attn.sliding_window}")
            pages = num_window_blocks if num_window_blocks and attn.sliding_window is not None else num_blocks
            cache = allocate(spec.cache_shape(pages), dtype=self.dtype, device=self.device)
            attn.bind_kv_cache(cache)
            caches.append(cache)
        self.kv_caches = caches  # in spec order; the KV tiers copy the main group's blocks
        self.num_blocks = num_blocks
        self.num_window_blocks = num_window_blocks

    def kv_cache_specs(self) -> list[KVCacheSpec]:
        dtype = str(self.dtype).removeprefix("torch.")
        return kv_cache_specs(self.cfg, self.block_size, dtype, self.tp_group.world_size)

    def capture_decode_graphs(self, max_batch: int, eager: bool = False) -> None:
        """Capture decode steps up to ``max_batch`` requests as CUDA graphs (after the KV cache
        exists). ``eager``: same static-buffer path replayed without graphs (any device; tests)."""
        if self.device.type != "cuda" and not eager:
            raise ValueError("CUDA graphs need a CUDA device")
        max_blocks = -(-self.max_model_len // self.block_size)
        graphs = DecodeGraphs(
            self.model,
            max_batch,
            max_blocks,
            self.block_size,
            self.device,
            windowed=self.num_window_blocks > 0,
        )
        if eager:
            graphs.use_eager()
        else:
            graphs.capture()
        self.graphs = graphs

    def capture_moe_graphs(self, max_tokens: int, eager: bool = False) -> int:
        """Capture the MoE blocks of eager steps up to ``max_tokens`` rows as CUDA graphs
        (``engine.runner.moe_graphs``); returns how many layers they serve (0: a dense model, or
        every MoE layer tensor or expert parallel). ``eager``: the static-buffer path without graphs."""
        if self.device.type != "cuda" and not eager:
            raise ValueError("CUDA graphs need a CUDA device")
        layers = graphable_moe_layers(self.model)
        if not layers:
            return 0
        if self.moe_graphs is not None:
            self.moe_graphs.detach()
        graphs = MoEBlockGraphs(layers, max_tokens, self.cfg.hidden_size, self.dtype, self.device)
        if eager:
            graphs.use_eager()
        else:
            failure = None
            try:
                graphs.capture()
            except torch.OutOfMemoryError:
                # The KV pool took the memory (a high gpu_memory_utilization): serve without them.
                failure = "no memory for their pool after the KV cache"
            except RuntimeError as error:  # a block that cannot be captured: serve eagerly, say why
                failure = f"capture failed: {error}"
            if failure is not None:
                del graphs  # its graphs and their pool, before the cache is emptied
                torch.cuda.empty_cache()
                log.warning("MoE block graphs left out (their blocks run eagerly): %s", failure)
                return 0
        graphs.attach()
        self.moe_graphs = graphs
        return len(layers)

    def add_generator(self, request_id: str, seed: int) -> None:
        self._generators[request_id] = torch.Generator(device=self.device).manual_seed(seed)

    def drop_request(self, request_id: str) -> None:
        self._generators.pop(request_id, None)

    def routing_statistics(self) -> dict[str, list[int]]:
        return moe.routing_statistics(self.model)

    def reset_routing_statistics(self) -> None:
        moe.reset_routing_statistics(self.model)

    def execute(self, out: SchedulerOutput) -> StepResult:
        return self.launch(out, share_samples=False).result()

    def can_overlap(self, out: SchedulerOutput) -> bool:
        """Whether this step's sampling needs nothing from the host that the step in flight could
        still change: penalties read every output token, logprobs and kept logits are read back.
        Grammar masks need the step in flight's tokens accepted too, but only when the sampling is
        queued: the engine reads that step in ``launch``'s ``before_sampling``."""
        if self.keep_logits:
            return False
        for s in out.scheduled:
            p = s.request.sampling_params
            if s.samples and p is not None and (p.needs_penalties or p.logprobs is not None):
                return False
        return True

    def launch(
        self,
        out: SchedulerOutput,
        share_samples: bool = True,
        before_sampling: Callable[[], None] | None = None,
    ) -> LaunchedStep:
        """Queue the step's GPU work and its sampling; the host reads the ids only in ``result()``.

        ``share_samples`` (tensor parallel): rank 0 broadcasts the sampled ids on the devices, so
        every rank can feed the next step's pending tokens (async scheduling) without the host.
        ``before_sampling``: called once, after the forward is queued and before the sampling is
        (async scheduling reads the previous step there, so grammars accept its tokens while the
        device runs this forward, and this step's masks are filled after that)."""
        self._before_sampling = before_sampling
        step = self._launch(out, share_samples and not self.group.is_single)
        self._sampling_begins()  # a step that samples nothing still runs it
        if self.step_events is not None and self.device.type == "cuda":
            end = torch.cuda.Event(enable_timing=True)
            end.record()
            self.step_events.append((self._step_start, end))
        return step

    def _sampling_begins(self) -> None:
        hook, self._before_sampling = self._before_sampling, None
        if hook is not None:
            hook()

    def _gpu_work_begins(self) -> None:
        """Mark where this step first queues GPU work (host-side input building comes before)."""
        if self.step_events is not None and self.device.type == "cuda":
            self._step_start = torch.cuda.Event(enable_timing=True)
            self._step_start.record()

    def _feeder(self, out: SchedulerOutput):
        """Writes the previous step's device-side samples where this step feeds pending tokens."""
        prev_ids, prev_rows = self._prev_ids, self._prev_rows

        def feed(buffer: torch.Tensor, dst: list[int]) -> None:
            src = [prev_rows[s.request.request_id] for s in out.scheduled if s.pending_token]
            dst_t = to_device(dst, torch.int64, self.device)
            if src == list(range(len(src))):
                values = prev_ids[: len(src)]
            else:
                values = prev_ids[to_device(src, torch.int64, self.device)]
            buffer.index_copy_(0, dst_t, values)

        return feed

    def _launch(self, out: SchedulerOutput, share: bool) -> LaunchedStep:
        if self.ep_group is not None:
            return self._launch_data_parallel(out, share)
        feed = self._feeder(out)
        if self.graphs is not None and self.hidden_sink is None and self.graphs.can_run(out):
            logits = self.graphs.run(out, self._gpu_work_begins, feed)
            rows = self.graphs.sample_rows(out)
            if rows is not None:  # a prompt tail's rows: its last token's logits sample
                logits = logits[to_device(rows, torch.int64, self.device)]
            if out.num_draft_tokens:  # one row per sampling position, as the eager verify's logits_indices
                return self._verify_step(logits, out.scheduled, share)
            return self._sample_step(logits, [s.request for s in out.scheduled], share)
        inputs = build_inputs(
            out,
            self.block_size,
            self.device,
            self._gpu_work_begins,
            feed,
            split_decode_rows=self.cfg.mla is not None,
        )
        if self.hidden_sink is None and len(inputs.sample_rows) == inputs.token_ids.shape[0]:
            # One token per request, each sampling: every row wants logits, as in the decode graphs
            # (same kernels, so the same bits with or without them).
            logits = self.model.decode_logits(inputs.token_ids, inputs.positions, inputs.meta)
            return self._sample_step(logits, [out.scheduled[i].request for i in inputs.sample_rows], share)
        hidden = self.model(inputs.token_ids, inputs.positions, inputs.meta)
        if self.hidden_sink is not None:
            self.hidden_sink(out, hidden)
        if not inputs.sample_rows:
            self._prev_ids, self._prev_rows = None, {}
            return LaunchedStep([], None, StepResult({}, {}))
        logits = self.model.compute_logits(hidden[inputs.logits_indices])
        if out.num_draft_tokens:
            return self._verify_step(logits, [out.scheduled[i] for i in inputs.sample_rows], share)
        return self._sample_step(logits, [out.scheduled[i].request for i in inputs.sample_rows], share)

    def _launch_data_parallel(self, out: SchedulerOutput, share: bool) -> LaunchedStep:
        """Expert parallel: run this rank's requests (attention on its own KV pool; a rank with none
        still serves its experts), then gather every rank's sampling rows to rank 0, which samples
        them all in rank order (and broadcasts the ids, as tensor parallel does)."""
        group = self.ep_group
        parts: list[list] = [[] for _ in range(group.world_size)]
        for s in out.scheduled:
            parts[s.block_ids[0] // self.num_blocks].append(s)
        offset = group.rank * self.num_blocks
        mine = [replace(s, block_ids=[b - offset for b in s.block_ids]) for s in parts[group.rank]]
        if mine:
            local = SchedulerOutput(mine)
            inputs = build_inputs(
                local,
                self.block_size,
                self.device,
                self._gpu_work_begins,
                self._feeder(local),
                split_decode_rows=self.cfg.mla is not None,
            )
            hidden = self.model(inputs.token_ids, inputs.positions, inputs.meta)
            rows = hidden[inputs.logits_indices]
        else:
            self._gpu_work_begins()
            moe.run_idle(self.model, self.cfg.hidden_size, self.dtype, self.device)
            rows = torch.empty((0, self.cfg.hidden_size), dtype=self.dtype, device=self.device)
        sampling = [[s.request for s in part if s.samples] for part in parts]
        requests = [r for part in sampling for r in part]
        if not requests:
            self._prev_ids, self._prev_rows = None, {}
            return LaunchedStep([], None, StepResult({}, {}))
        gathered = group.gather_rows(rows, [len(part) for part in sampling])
        logits = self.model.compute_logits(gathered) if self.samples else None
        return self._sample_step(logits, requests, share)

    def routing_statistics_all_ranks(self) -> dict[str, list[int]]:
        """Expert parallel: every rank's routing counts summed (a collective: every rank calls it)."""
        layers = moe.moe_layers(self.model)
        if not layers:
            return {}
        counts = torch.stack([m.expert_token_counts for _, m in layers])
        counts = self.group.all_reduce_counts(counts.clone())
        return {name: row.tolist() for (name, _), row in zip(layers, counts, strict=True)}

    def rebalance_experts(self) -> None:
        """Expert parallel: the load balancer's turn (a collective: every rank calls it)."""
        if self.balancer is not None:
            self.balancer.rebalance()

    def expert_parallel_report(self, expert_tokens: dict[str, list[int]]) -> dict[str, dict]:
        """Expert parallel: per MoE layer, the tokens each rank's experts processed (``expert_tokens``:
        every rank's routing counts summed, split over the layer's current placement), their
        imbalance ratio (busiest rank / mean) and how often the load balancer moved experts."""
        if self.ep_group is None:
            return {}
        moves = {name: r.moves for name, r in self.balancer.report.items()} if self.balancer else {}
        report = {}
        for name, layer in moe.moe_layers(self.model):
            counts = expert_tokens.get(name)
            if counts is None:
                continue
            report[name] = {
                "rank_tokens": layer.placement.rank_loads(counts),
                "imbalance_ratio": layer.placement.imbalance_ratio(counts),
                "moves": moves.get(name, 0),
            }
        return report

    def _verify_step(self, logits: torch.Tensor, scheduled: list, share: bool) -> LaunchedStep:
        """Speculative decoding: sample every draft position (``engine.sampling.verify``) and keep
        each request's verified prefix; the host reads the ids (the next drafts need them)."""
        ids = [s.request.request_id for s in scheduled]
        self._prev_ids, self._prev_rows = None, {}
        if not self.samples:
            return LaunchedStep(ids, None, StepResult({}, {}))
        sampled: dict[str, int] = {}
        accepted: dict[str, list[int]] = {}
        logprobs: dict[str, Logprob] = {}
        # Structured outputs: every row sampled under its grammar as advanced through the draft
        # tokens before it, so a draft token the grammar refuses is rejected at its own row.
        apply_draft_grammars(logits, scheduled, self.grammar_masks)
        # A request whose every row is chosen up front (the argmax, or unseeded: no generator whose
        # order must be kept) reads its tokens with the batch's one device read; seeded requests
        # sample position by position, consuming their generator once per emitted token.
        up_front = [
            s.request.sampling_params.logprobs is None
            and (greedy_only([s.request]) or s.request.request_id not in self._generators)
            for s in scheduled
        ]
        chosen = self._chosen_up_front(logits, scheduled, up_front) if any(up_front) else None
        row = 0
        for s, known in zip(scheduled, up_front, strict=True):
            request, draft = s.request, s.draft_token_ids
            lo, row = row, row + len(draft) + 1
            # A torch slice per request costs microseconds of host time: only where rows are read.
            rows = None if known else logits[lo:row]
            if request.sampling_params.logprobs is not None:  # never drafts: sampled as without speculation
                plain = self.sample(rows, [request])
                sampled.update(plain.sampled)
                logprobs.update(plain.logprobs)
                continue
            state_at, greedy_ids = None, chosen[lo:row] if known else None
            if not known:
                state_at = lambda i, request=request, draft=draft: self._state(request, draft[:i])  # noqa: E731
            if self.acceptance_override is not None:
                n = self.acceptance_override.accepted_prefix(request, len(draft))
                emitted = verify_forced(rows, draft, state_at, greedy_ids, n)
            else:
                emitted = verify_draft(rows, draft, state_at, greedy_ids)
            sampled[request.request_id] = emitted[-1]
            if draft:
                accepted[request.request_id] = emitted[:-1]
        return LaunchedStep(ids, None, StepResult(sampled, logprobs, accepted=accepted))

    def _chosen_up_front(self, logits: torch.Tensor, scheduled: list, up_front: list[bool]) -> list[int]:
        """Every row's token, read in one go: the argmax, except rows of up-front requests that are
        not plain greedy (penalties, banned ids under min_tokens, unseeded sampling), chosen with
        the state after the draft tokens before the row. Sampling every position of an unseeded
        request, also those after its first rejection (dropped), keeps its tokens' distribution:
        each position's sample is drawn from that position's own conditional distribution."""
        chosen = logits.argmax(dim=-1)
        rows: list[int] = []
        states: list[SamplingState] = []
        row = 0
        for s, known in zip(scheduled, up_front, strict=True):
            lo, row = row, row + s.num_draft_tokens + 1
            if known and not greedy_only([s.request]):
                draft = s.draft_token_ids
                rows.extend(range(lo, row))
                states.extend(self._state(s.request, draft[:i]) for i in range(len(draft) + 1))
        if rows:
            index = torch.tensor(rows, dtype=torch.int64, device=logits.device)
            chosen[index] = choose_tokens(logits[index], states)
        return chosen.tolist()

    def _sample_step(self, logits: torch.Tensor, requests: list, share: bool) -> LaunchedStep:
        self._sampling_begins()
        ids = [r.request_id for r in requests]
        if not self.samples:
            if share:  # rank > 0: rank 0's samples arrive on the device, for the next step to feed
                chosen = torch.empty(len(ids), dtype=torch.int64, device=self.device)
                self._prev_ids = self.group.broadcast_from_first(chosen)
                self._prev_rows = {rid: row for row, rid in enumerate(ids)}
            return LaunchedStep(ids, None, StepResult({}, {}))
        done = None
        apply_grammars(logits, requests, self.grammar_masks)
        if greedy_only(requests):
            chosen = logits.argmax(dim=-1)
        elif not self.keep_logits and not any(
            r.sampling_params.needs_penalties or r.sampling_params.logprobs is not None for r in requests
        ):
            chosen = choose_tokens(logits, self._states(requests))
        else:
            done = self.sample(logits, requests)
            chosen = torch.tensor([done.sampled[i] for i in ids], dtype=torch.int64, device=logits.device)
        if self.keep_logits:
            done = done or StepResult(dict(zip(ids, chosen.tolist(), strict=True)), {})
            done.logits = {r.request_id: logits[i].cpu() for i, r in enumerate(requests)}
        if share:
            self.group.broadcast_from_first(chosen)
        self._prev_ids, self._prev_rows = chosen, {rid: row for row, rid in enumerate(ids)}
        return LaunchedStep(ids, chosen, done)

    def _states(self, requests: list) -> list[SamplingState]:
        return [self._state(request) for request in requests]

    def _state(self, request, draft: list[int] = ()) -> SamplingState:
        """``draft``: accepted draft tokens that precede the sampled position (speculative decoding)."""
        banned = []
        if num_outputs_before(request) + len(draft) < request.min_tokens:
            banned = sorted(
                set(request.stop_token_ids) | (set() if request.ignore_eos else request.eos_token_ids)
            )
        return SamplingState(
            params=request.sampling_params,
            generator=self._generators.get(request.request_id),
            prompt_token_ids=request.prompt_token_ids,
            output_token_ids=request.output_token_ids + list(draft) if draft else request.output_token_ids,
            banned_token_ids=banned,
        )

    def sample(self, logits: torch.Tensor, requests: list) -> StepResult:
        token_ids, logprobs = sample(logits, self._states(requests))
        ids = [r.request_id for r in requests]
        return StepResult(
            sampled=dict(zip(ids, token_ids, strict=True)),
            logprobs={rid: lp for rid, lp in zip(ids, logprobs, strict=True) if lp is not None},
        )
