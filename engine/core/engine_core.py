"""The engine: admit requests, run steps, turn sampled tokens into outputs.

Single-threaded by design: the one drive loop (``engine.core.drive_loop``) runs it, in the caller's
thread (``LLM``), in an engine thread (``InThreadEngineClient``) or in a process of its own
(``engine.core.process_main``, what ``chassis serve`` runs).
``prepare`` only reads immutable state, so callers may run it on another thread to validate and
tokenize before handing the request over.

With ``async_scheduling`` a step schedules and launches step N+1 before it reads step N's sampled
ids, so the host's scheduling and input staging overlap the GPU's work: a decode request's next
input is its just-sampled token, fed on the device. Outputs (stop checks, detokenizing) come one
step late; a request that stops then has one speculative token computed past its end, discarded.
A step with grammar rows reads step N inside its launch, between its forward and its sampling (the
masks need step N's tokens accepted).
"""

from __future__ import annotations

import random
import threading
import time
import uuid
from dataclasses import dataclass

import torch

from engine.checkpoint.model_config import load_model_config
from engine.config import EngineConfig
from engine.core.busy_time import BusySeconds
from engine.core.prompt_validation import validated_prompt_ids
from engine.executor.factory import make_executor
from engine.kv.data_parallel import DataParallelKV
from engine.kv.events import KVEventLog
from engine.kv.kv_manager import KVCacheManager
from engine.kv.tiers.build import build_tiered_kv
from engine.outputs import EngineStats, KVTierStats, RequestMetrics, RequestOutput
from engine.runner.cuda_graphs import max_graph_rows
from engine.runner.kv_sizing import kv_layout, kv_pool_sizes
from engine.runner.model_runner import TORCH_DTYPES, LaunchedStep, StepResult
from engine.sampling.params import SamplingParams
from engine.scheduler.output import SchedulerOutput
from engine.scheduler.request import Request, RequestStatus
from engine.scheduler.scheduler import Scheduler
from engine.spec.proposer import Proposer
from engine.spec.speculator import make_speculator, verify_graph_sizes
from engine.structured.bitmask import samples_under_grammar
from engine.structured.compiler import GrammarCompilerPool
from engine.structured.grammar import accept_tokens
from engine.structured.spec import check as check_structured
from engine.switches import apply_switches
from engine.testing import step_gate
from engine.tokenizer.detokenizer import IncrementalDetokenizer
from engine.tokenizer.tokenizer import Tokenizer
from kernels._common import kernels_mode

ROUTING_REFRESH_S = 1.0  # how stale the per-expert token counts in stats() may be
GRAMMAR_POLL_S = 0.005  # an idle engine waits this long for a compiling grammar before looking again


@dataclass
class PreparedRequest:
    request: Request
    detokenizer: IncrementalDetokenizer
    seed: int | None  # generator seed; None for greedy requests
    metrics: RequestMetrics
    # Only the finished output is wanted (``LLM.generate``): no per-token outputs, and without stop
    # strings the text is decoded once at the end instead of token by token.
    final_only: bool = False
    logprobs: list | None = None  # final_only: logprobs gathered until the end


class EngineCore:
    def __init__(self, config: EngineConfig, kv_events: KVEventLog | None = None) -> None:
        """``kv_events``: the log prefix-cache changes go to (default: a new one of the configured
        capacity); the engine-core process passes one that also forwards them to the server."""
        self.config = config
        apply_switches(config)  # process-wide kernel and all-reduce modes, before anything runs
        self.model_config = load_model_config(config.model_dir)
        self.device = torch.device(config.resolved_device())
        dtype_name = self.model_config.dtype if config.dtype == "auto" else config.dtype
        self.dtype = TORCH_DTYPES[dtype_name]
        limit = self.model_config.max_position_embeddings
        if config.max_model_len is not None and config.max_model_len > limit:
            raise ValueError(
                f"max_model_len={config.max_model_len} exceeds the model's max_position_embeddings={limit}"
            )
        self.max_model_len = config.max_model_len or limit
        self.tokenizer = Tokenizer(config.model_dir, self.model_config.eos_token_ids)
        # The Executor (engine/executor/protocol.py): one device, or rank 0 of k tensor-parallel ranks.
        self.runner = make_executor(config, self.model_config, self.device, self.dtype, self.max_model_len)
        self.kv_layout = kv_layout(config, self.model_config, self.dtype)  # engine/kv/layout.py
        pools = kv_pool_sizes(config, self.model_config, self.max_model_len, self.device, self.dtype)
        num_blocks = pools.num_blocks
        self.runner.allocate_kv_cache(num_blocks, pools.num_window_blocks)
        # The torch reference kernels read sizes back to the host, which a graph cannot capture.
        # Expert parallel: no decode graphs yet (the dispatch reads its split sizes on the host).
        expert_parallel = config.expert_parallel_size > 1
        if (
            self.device.type == "cuda"
            and not config.enforce_eager
            and kernels_mode() != "torch"
            and not expert_parallel
        ):
            self.runner.capture_decode_graphs(max_graph_rows(config))
            if config.moe_graphs == "auto" and not config.batch_invariant:
                # Captured after the decode graphs, which capture the MoE blocks themselves.
                self.runner.capture_moe_graphs(config.max_num_batched_tokens)
        self.kv_events = kv_events if kv_events is not None else KVEventLog(config.kv_event_capacity)
        self.kv_tiers = None  # host memory, disk, shared store below the device pool (engine/kv/tiers/)
        if config.kv_tiers_enabled:
            specs, caches = self.runner.kv_cache_specs(), self.runner.kv_caches
            main = self.kv_layout.main_layers  # the window group is never cached, so never tiered
            self.kv_tiers = build_tiered_kv(
                config, self.device, [caches[i] for i in main], [specs[i] for i in main]
            )
        if expert_parallel:  # each rank's own pool of num_blocks (engine/kv/data_parallel.py)
            self.kv = DataParallelKV(
                config.expert_parallel_size,
                num_blocks,
                config.block_size,
                config.enable_prefix_caching,
                self.kv_events,
            )
        else:
            self.kv = KVCacheManager(
                num_blocks,
                config.block_size,
                config.enable_prefix_caching,
                self.kv_events,
                self.kv_tiers,
                write_through=config.kv_role == "prefill",
                layout=self.kv_layout,
                num_window_blocks=pools.num_window_blocks,
            )
        self.scheduler = Scheduler(
            self.kv,
            config.max_num_batched_tokens,
            config.max_num_seqs,
            admission_batch=config.admission_batch,
        )
        self.async_scheduling = config.resolved_async_scheduling(self.device.type)
        self.speculator = make_speculator(config, self._build_proposer)
        if self.speculator is not None:
            self.speculator.policy.use_graphs(verify_graph_sizes(self.runner))
        # Launched, not yet read: the step, its handle and its launch time (perf_counter).
        self._pending: tuple[SchedulerOutput, LaunchedStep, float] | None = None
        self._last_done = 0.0  # perf_counter when the last step's samples reached the host
        self._states: dict[str, PreparedRequest] = {}
        self._seed_rng = random.Random(config.seed)
        self._grammar_pool: GrammarCompilerPool | None = None  # built by the first structured request
        self._grammar_pool_lock = threading.Lock()
        self.prompt_tokens = 0
        self.generation_tokens = 0
        self.busy_seconds = BusySeconds()
        self.recorded_logits: dict[str, list[torch.Tensor]] = {}  # filled when runner.keep_logits (tests)
        if self.device.type == "cuda" and config.warm_up and not expert_parallel:
            from engine.core.warm_up import warm_up

            warm_up(self)
        self.runner.reset_routing_statistics()  # forget graph capture's and warm-up's tokens
        self._expert_tokens: dict[str, list[int]] = {}
        self._expert_parallel: dict[str, dict] = {}
        self._expert_tokens_read_at = -ROUTING_REFRESH_S

    # -- admission ---------------------------------------------------------------------------
    def prepare(
        self,
        prompt: str | list[int],
        params: SamplingParams,
        request_id: str | None = None,
        cache_salt: str | None = None,
        final_only: bool = False,
        arrival_time: float | None = None,
    ) -> PreparedRequest:
        """Validate and tokenize; raises ValueError for a prompt the engine cannot serve.

        ``final_only``: the caller wants only the finished output (one per request, everything in
        it new), not one per token; the server streams and leaves it False. ``arrival_time``: when
        the request reached the server (``time.monotonic()``, system-wide on Linux, so another
        process may stamp it); default now."""
        prompt_ids = validated_prompt_ids(
            prompt, params, self.tokenizer, self.model_config.vocab_size, self.max_model_len
        )
        room = self.max_model_len - len(prompt_ids)
        request = Request(
            request_id=request_id or uuid.uuid4().hex,
            prompt_token_ids=prompt_ids,
            max_tokens=min(params.max_tokens or room, room),
            eos_token_ids=frozenset(self.tokenizer.eos_token_ids),
            stop_token_ids=frozenset(params.stop_token_ids),
            ignore_eos=params.ignore_eos,
            min_tokens=params.min_tokens,
            cache_salt=cache_salt,
            sampling_params=params,
            arrival_time=time.monotonic() if arrival_time is None else arrival_time,
        )
        if params.structured is not None:
            check_structured(params.structured)  # ValueError (a 400) before the request is admitted
        if params.structured is not None or params.thinking_budget is not None:
            # A thinking budget rides on the grammar state: the same step forces its end marker.
            request.grammar = self.grammar_pool().grammar_for(params.structured, params.thinking_budget)
        detokenizer = IncrementalDetokenizer(
            self.tokenizer.backend, params.skip_special_tokens, params.stop, params.include_stop_str_in_output
        )
        seed = None
        if not params.greedy:
            seed = params.seed if params.seed is not None else self._seed_rng.getrandbits(63)
        return PreparedRequest(
            request,
            detokenizer,
            seed,
            RequestMetrics(arrival_time=request.arrival_time),
            final_only=final_only,
            logprobs=[] if final_only and params.logprobs is not None else None,
        )

    def grammar_pool(self) -> GrammarCompilerPool:
        with self._grammar_pool_lock:
            if self._grammar_pool is None:
                self._grammar_pool = GrammarCompilerPool(
                    self.tokenizer.hf, self.model_config.vocab_size, self.tokenizer.eos_token_ids
                )
            return self._grammar_pool

    def add(self, prepared: PreparedRequest) -> str:
        rid = prepared.request.request_id
        if rid in self._states:
            raise ValueError(f"request id {rid!r} is already in use")
        self.scheduler.add_request(prepared.request)
        self._states[rid] = prepared
        if prepared.seed is not None:
            self.runner.add_generator(rid, prepared.seed)
        self.prompt_tokens += prepared.request.num_prompt_tokens
        return rid

    def add_request(self, prompt, params: SamplingParams, request_id=None, cache_salt=None) -> str:
        return self.add(self.prepare(prompt, params, request_id, cache_salt))

    def abort(self, request_id: str) -> RequestOutput | None:
        state = self._states.get(request_id)
        if state is None:
            return None
        self.scheduler.finish_request(request_id, RequestStatus.FINISHED_ABORTED)
        if state.final_only:
            if not state.detokenizer.has_stop_strings:
                return self._finish_final_only(state)
            return self._finish_whole(state)
        return self._finish_output(state, [], None, "")

    # -- stepping ----------------------------------------------------------------------------
    def has_unfinished(self) -> bool:
        return self.scheduler.num_unfinished > 0 or self._pending is not None

    def step(self) -> list[RequestOutput]:
        if step_gate.holds(state.request for state in self._states.values()):  # only when a test gates
            return []
        failed = self._abort_failed_grammars() if self._grammar_pool is not None else []
        if self.async_scheduling:
            return failed + self._step_overlapped()
        began = time.perf_counter()
        if self.speculator is not None:
            self.speculator.propose(self.scheduler.running)
        out = self.scheduler.schedule()
        if out.is_empty:
            self._check_progress()
            return failed
        return failed + self._execute(out, began)

    def _abort_failed_grammars(self) -> list[RequestOutput]:
        """Requests whose grammar failed to compile end as aborted rather than run unconstrained
        (specs are checked before admission, so this is a compiler fault, not bad input)."""
        failed = [r for r in self.scheduler.waiting if r.grammar is not None and r.grammar.error is not None]
        return [out for out in map(self.abort, (r.request_id for r in failed)) if out is not None]

    def _execute(self, out: SchedulerOutput, began: float) -> list[RequestOutput]:
        """Run a step to its samples and process them. The speculation policy gets its wall-clock
        cost from ``began`` (the step's drafting and scheduling) to its outputs processed: nothing
        overlaps a synchronous step's host work."""
        started = time.perf_counter()
        result = self.runner.execute(out)
        self._last_done = time.perf_counter()
        self.busy_seconds.add(out, self._last_done - started)
        if self.speculator is None:
            return self._process(out, result)
        self.speculator.observe(out, result.accepted, None)  # before _process drops finished requests
        outputs = self._process(out, result)
        self.speculator.observe_time(out, time.perf_counter() - began)
        return outputs

    def _step_speculating(self) -> list[RequestOutput]:
        """Async scheduling with speculation paying off: drafts need every token on the host, so
        the step in flight is read first and the speculating step runs to its samples. A step that
        ends up with no drafts (the proposer's confidence said no) is launched as a plain one, so
        the next step overlaps it."""
        began = time.perf_counter()
        if self._pending is not None:
            outputs = self._process_pending()
            # From the step in flight's samples: processing them is this step's cost, as nothing
            # overlaps it now.
            began = self._last_done
        else:
            outputs = []
        self.speculator.propose(self.scheduler.running)
        out = self.scheduler.schedule()
        if out.is_empty:
            return outputs
        if not out.num_draft_tokens:
            launched_at = time.perf_counter()
            self._pending = (out, self.runner.launch(out), launched_at)
            return outputs
        return outputs + self._execute(out, began)

    def _step_overlapped(self) -> list[RequestOutput]:
        """Launch step N+1, then read and process step N while the device runs N+1."""
        if self.speculator is not None and self.speculator.wants_drafts(self.scheduler.running):
            return self._step_speculating()
        out = self.scheduler.schedule()
        if out.is_empty:
            if self._pending is None:
                self._check_progress()
                return []
            return self._process_pending()
        outputs: list[RequestOutput] = []
        launched_at = time.perf_counter()
        if self._pending is not None and not self.runner.can_overlap(out):
            outputs = self._process_pending()  # penalties etc. read the host's token history
            launched_at = time.perf_counter()
        if self._pending is not None and samples_under_grammar(out.scheduled):
            # The masks need step N's tokens accepted: N is read while the device runs N+1's forward,
            # then N+1's masks are filled and its sampling queued.
            launched = self.runner.launch(
                out, before_sampling=lambda: outputs.extend(self._process_pending())
            )
        else:
            launched = self.runner.launch(out)
            if self._pending is not None:
                outputs += self._process_pending()
        self._pending = (out, launched, launched_at)
        return outputs

    def _process_pending(self) -> list[RequestOutput]:
        """Read the step in flight. Its device time, for the speculation policy's plain-step model:
        from its start (its launch, or the previous step's samples when it was queued behind that
        step) to its samples; while the host keeps up that is the interval between consecutive
        completions."""
        out, launched, launched_at = self._pending
        self._pending = None
        result = launched.result()
        done = time.perf_counter()
        self.busy_seconds.add(out, done - max(launched_at, self._last_done))
        if self.speculator is not None:
            self.speculator.observe(out, result.accepted, done - max(launched_at, self._last_done))
        self._last_done = done
        return self._process(out, result)

    def _check_progress(self) -> None:
        if self.scheduler.all_waiting_on_grammars and not self.scheduler.running:
            self.scheduler.waiting[0].grammar.wait(GRAMMAR_POLL_S)  # idle anyway: no spinning
            return
        if self.scheduler.waiting and not self.scheduler.running:
            # Cannot happen while one max_model_len sequence fits the pool; fail loudly, not spin.
            raise RuntimeError("scheduler made no progress: the KV pool cannot hold the next request")

    def _process(self, out: SchedulerOutput, result: StepResult) -> list[RequestOutput]:
        self._advance_grammars(out, result.sampled, result.accepted)
        self.scheduler.update_from_output(out, result.sampled, result.accepted)
        emitted = {s.request.request_id: s.emitted for s in out.scheduled if s.num_draft_tokens}
        outputs = []
        now = time.monotonic()
        states = self._states
        for rid, token_id in result.sampled.items():
            state = states.get(rid)
            if state is None:  # finished or aborted while this step was in flight: a spare token
                continue
            request = state.request
            token_ids = emitted.get(rid) or [token_id]
            self.generation_tokens += len(token_ids)
            if state.metrics.first_token_time is None:
                state.metrics.first_token_time = now
                state.metrics.first_scheduled_time = request.first_scheduled_time
            if result.logits is not None:
                self.recorded_logits.setdefault(rid, []).append(result.logits[rid])
            logprob = result.logprobs.get(rid)
            if state.final_only and not state.detokenizer.has_stop_strings:
                if logprob is not None:
                    state.logprobs.append(logprob)
                if request.status.finished:
                    outputs.append(self._finish_final_only(state))
                continue
            if len(token_ids) == 1:
                new_text = state.detokenizer.push(token_ids)
            else:
                new_text, token_ids = self._push_draft(state, token_ids)
            if state.detokenizer.stop_string is not None and not request.status.finished:
                request.stop_reason = state.detokenizer.stop_string
                self.scheduler.finish_request(rid, RequestStatus.FINISHED_STOPPED)
            if state.final_only:
                if logprob is not None:
                    state.logprobs.append(logprob)
                if request.status.finished:
                    outputs.append(self._finish_whole(state))
                continue
            new_logprobs = [logprob] if logprob is not None else None
            if request.status.finished:
                outputs.append(self._finish_output(state, token_ids, new_logprobs, new_text))
            else:
                outputs.append(self._output(state, token_ids, new_logprobs, new_text))
        return outputs

    @staticmethod
    def _advance_grammars(
        out: SchedulerOutput, sampled: dict[str, int], accepted: dict[str, list[int]]
    ) -> None:
        """Structured output: each grammar accepts its request's emitted tokens: its accepted draft
        tokens in order, then the sampled one (the verify step masked each under the grammar)."""
        grammars, tokens = [], []
        for s in out.scheduled:
            request = s.request
            rid = request.request_id
            if request.grammar is not None and not request.status.finished and rid in sampled:
                for token in accepted.get(rid, ()):
                    request.grammar.accept(token)
                grammars.append(request.grammar)
                tokens.append(sampled[rid])
        if grammars:
            accept_tokens(grammars, tokens)

    @staticmethod
    def _push_draft(state: PreparedRequest, token_ids: list[int]) -> tuple[str, list[int]]:
        """Detokenize a step's several tokens one by one: a stop string ends the request at the token
        that completes it, as without speculation, and the tokens after it are dropped."""
        text = ""
        for i, token in enumerate(token_ids):
            text += state.detokenizer.push([token])
            if state.detokenizer.stop_string is not None:
                state.request.drop_last_output_tokens(len(token_ids) - i - 1)
                return text, token_ids[: i + 1]
        return text, token_ids

    def _build_proposer(self, method: str) -> Proposer:
        if method == "ngram":
            from engine.spec.ngram import NgramProposer

            return NgramProposer()
        if method == "draft_model":
            from engine.spec.draft_model import DraftModelProposer

            return DraftModelProposer(
                self.config, self.model_config.vocab_size, self.device, self.max_model_len
            )
        from engine.spec.mtp import MTPProposer

        return MTPProposer(self.runner, self.config, self.max_model_len)

    def _finish_final_only(self, state: PreparedRequest) -> RequestOutput:
        """A final-only request without stop strings: its text is decoded here, once."""
        ids = state.request.output_token_ids
        text = state.detokenizer.decode_all(ids)
        return self._finish_output(state, list(ids), state.logprobs, text)

    def _finish_whole(self, state: PreparedRequest) -> RequestOutput:
        """A final-only request's one output: everything is new (its text was pushed per token)."""
        ids = state.request.output_token_ids
        return self._finish_output(state, list(ids), state.logprobs, state.detokenizer.text)

    def shutdown(self) -> None:
        """Keep the pool's cached KV in the persistent tiers (disk, shared store; a restart finds it
        there), then release what outlives the object: the other tensor-parallel ranks' processes."""
        self.kv.offload_idle_blocks()
        self.runner.shutdown()

    def routing_statistics(self) -> dict[str, list[int]]:
        """Per mixture-of-experts layer, the tokens routed to each expert so far (load imbalance)."""
        return self.runner.routing_statistics()

    def stats(self) -> EngineStats:
        pool = self.kv.pool
        return EngineStats(
            num_running=len(self.scheduler.running),
            num_waiting=len(self.scheduler.waiting),
            kv_usage=self.kv.usage(),
            num_blocks_total=pool.num_blocks,
            num_blocks_used=pool.num_used_blocks,
            prefix_cache_queries=self.kv.prefix_cache_queries,
            prefix_cache_hits=self.kv.prefix_cache_hits,
            num_preemptions=self.scheduler.num_preemptions,
            prompt_tokens=self.prompt_tokens,
            generation_tokens=self.generation_tokens,
            expert_tokens=self._routing_snapshot(),
            expert_parallel=self._expert_parallel,
            kv_tiers=self._tier_stats(),
            busy_seconds=self.busy_seconds.as_dict(),
            window_blocks_total=self.kv.window.pool.num_blocks if self.kv_layout.hybrid else 0,
            window_kv_usage=self.kv.window_usage(),
            **self._spec_stats(),
        )

    def _tier_stats(self) -> dict[str, KVTierStats]:
        if self.kv_tiers is None:
            return {}
        return {
            name: KVTierStats(
                c.hit_tokens, c.offloads, c.onloads, s.entries, s.bytes_held, c.onload_bytes, c.onload_s
            )
            for name, (s, c) in self.kv_tiers.stats().items()
        }

    def _spec_stats(self) -> dict:
        spec = self.speculator
        if spec is None:
            return {}
        return dict(
            spec_decode_num_drafts=spec.num_drafts,
            spec_decode_num_draft_tokens=spec.num_draft_tokens,
            spec_decode_num_accepted_tokens=spec.num_accepted_tokens,
            spec_decode_num_accepted_tokens_per_pos=list(spec.num_accepted_tokens_per_pos),
        )

    def _routing_snapshot(self) -> dict[str, list[int]]:
        """``routing_statistics()``, re-read at most every ROUTING_REFRESH_S: ``stats()`` runs every
        turn of the loop, and reading the counts waits for the device."""
        now = time.monotonic()
        if now - self._expert_tokens_read_at >= ROUTING_REFRESH_S:
            self._expert_tokens = self.runner.routing_statistics()
            self._expert_parallel = self.runner.expert_parallel_report(self._expert_tokens)
            self._expert_tokens_read_at = now
        return self._expert_tokens

    # -- outputs -----------------------------------------------------------------------------
    def _finish_output(self, state: PreparedRequest, new_ids, new_logprobs, new_text: str) -> RequestOutput:
        new_text += state.detokenizer.flush()
        state.metrics.finished_time = time.monotonic()
        self._states.pop(state.request.request_id, None)
        self.runner.drop_request(state.request.request_id)
        if self.speculator is not None:
            self.speculator.drop(state.request.request_id)
        return self._output(state, new_ids, new_logprobs, new_text)

    @staticmethod
    def _output(state: PreparedRequest, new_ids, new_logprobs, new_text: str) -> RequestOutput:
        request = state.request
        status = request.status
        if state.request.sampling_params.logprobs is not None and new_logprobs is None:
            new_logprobs = []
        return RequestOutput(
            request_id=request.request_id,
            prompt_token_ids=request.prompt_token_ids,
            new_token_ids=list(new_ids),
            token_ids=list(request.output_token_ids),
            new_text=new_text,
            text=state.detokenizer.text,
            new_logprobs=new_logprobs,
            finished=status.finished,
            finish_reason=status.finish_reason,
            stop_reason=request.stop_reason,
            num_cached_tokens=max(request.num_cached_tokens, 0),
            metrics=state.metrics,
        )
