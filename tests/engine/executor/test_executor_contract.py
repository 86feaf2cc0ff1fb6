"""The ``Executor`` contract, run against every implementation: the single-device executor, the
tensor-parallel one at TP=2 and the expert-parallel one at EP=2 on CPU (gloo, a real rank process),
on a tiny mixture-of-experts model (expert parallel needs one).

Each executor is driven the way ``EngineCore`` drives it (a real scheduler and KV manager; steps run
synchronously, or overlapped with pending tokens fed on the device), and must sample the tokens the
plain ``ModelRunner`` samples for the same scheduled steps. A new executor joins ``EXECUTORS``."""

from __future__ import annotations

import inspect
from multiprocessing import resource_tracker

import psutil
import pytest
import torch

from engine.checkpoint.model_config import load_model_config
from engine.config import EngineConfig
from engine.executor.factory import make_executor, runner_kwargs
from engine.executor.protocol import Executor, QueuedStep
from engine.executor.single_device import SingleDeviceExecutor
from engine.executor.tensor_parallel import TensorParallelExecutor
from engine.kv.data_parallel import DataParallelKV
from engine.kv.kv_manager import KVCacheManager
from engine.runner.model_runner import ModelRunner
from engine.sampling.params import SamplingParams
from engine.scheduler.request import Request, RequestStatus
from engine.scheduler.scheduler import Scheduler

# kind -> (ranks, class, the EngineConfig sizes that ask for it)
EXECUTORS = {
    "single-device": (1, SingleDeviceExecutor, {}),
    "tensor-parallel-2": (2, TensorParallelExecutor, {"tensor_parallel_size": 2}),
    "expert-parallel-2": (2, TensorParallelExecutor, {"expert_parallel_size": 2, "data_parallel_size": 2}),
}
NUM_BLOCKS = 64
MAX_MODEL_LEN = 256
TOKEN_BUDGET = 32  # small: chunked prefill, and steps that mix prefill chunks with decodes

GREEDY = SamplingParams(max_tokens=10, temperature=0.0, ignore_eos=True)
SEEDED = SamplingParams(max_tokens=8, temperature=0.8, top_p=0.9, seed=7, ignore_eos=True)
PENALIZED = SamplingParams(max_tokens=6, temperature=0.0, repetition_penalty=1.3, ignore_eos=True)
PROMPTS = {
    "short": ([5, 6, 7, 8, 9], GREEDY),
    "long": (list(range(20, 70)), GREEDY),
    "seeded": ([11, 12, 13, 14, 15, 16, 17], SEEDED),
    "penalized": ([3, 4, 3, 4, 3, 4], PENALIZED),
}


def _config(model_dir, kind: str) -> EngineConfig:
    return EngineConfig(model_dir, device="cpu", dtype="float32", max_model_len=MAX_MODEL_LEN, **EXECUTORS[kind][2])


def _build(model_dir, kind: str):
    executor = make_executor(
        _config(model_dir, kind),
        load_model_config(model_dir),
        torch.device("cpu"),
        torch.float32,
        MAX_MODEL_LEN,
    )
    executor.allocate_kv_cache(NUM_BLOCKS)
    return executor


@pytest.fixture(scope="module")
def model_dir(tiny_models):
    return tiny_models["qwen3_moe"]


class LiveExecutors:
    """One executor of each kind shared by the tests, built on first use. A process joins one
    tensor-parallel group at a time, so a test that builds its own closes these first."""

    def __init__(self, model_dir) -> None:
        self.model_dir = model_dir
        self.live: dict[str, Executor] = {}

    def get(self, kind: str) -> Executor:
        if kind not in self.live:
            if EXECUTORS[kind][0] > 1:  # one process group per process: close the other multi-rank one
                for other in [k for k in self.live if EXECUTORS[k][0] > 1]:
                    self.live.pop(other).shutdown()
            self.live[kind] = _build(self.model_dir, kind)
        return self.live[kind]

    def close(self) -> None:
        for executor in self.live.values():
            executor.shutdown()
        self.live.clear()


@pytest.fixture(scope="module")
def live_executors(model_dir):
    live = LiveExecutors(model_dir)
    yield live
    live.close()


@pytest.fixture(params=list(EXECUTORS))
def executor(request, live_executors):
    return live_executors.get(request.param)


@pytest.fixture(scope="module")
def reference(model_dir):
    """The plain model runner, as ``EngineCore`` used it before there were executors."""
    config = _config(model_dir, "single-device")
    args = (config, load_model_config(model_dir), torch.device("cpu"), torch.float32, MAX_MODEL_LEN)
    runner = ModelRunner(**runner_kwargs(*args))
    runner.allocate_kv_cache(NUM_BLOCKS)
    return runner


def _kv_manager(executor):
    """As ``EngineCore`` builds it: an expert-parallel replica's ranks each have their own pool."""
    if getattr(executor, "expert_parallel", False):
        return DataParallelKV(executor.world_size, NUM_BLOCKS, 16, enable_caching=False)
    return KVCacheManager(NUM_BLOCKS, 16, enable_caching=False)


class Driver:
    """``EngineCore``'s use of an executor, without detokenizing or outputs."""

    def __init__(self, executor, names: list[str], overlapped: bool) -> None:
        self.executor = executor
        self.overlapped = overlapped
        self.scheduler = Scheduler(_kv_manager(executor), TOKEN_BUDGET, 8)
        self.requests: dict[str, Request] = {}
        for name in names:
            prompt, params = PROMPTS[name]
            request = Request(name, list(prompt), params.max_tokens, ignore_eos=True, sampling_params=params)
            self.scheduler.add_request(request)
            self.requests[name] = request
            if params.seed is not None:
                executor.add_generator(name, params.seed)
        self.pending = None
        self.steps = 0

    def step(self) -> None:
        out = self.scheduler.schedule()
        if not self.overlapped:
            if not out.is_empty:
                self._process(out, self.executor.execute(out))
            return
        if out.is_empty:
            self._read_pending()
            return
        if self.pending is not None and not self.executor.can_overlap(out):
            self._read_pending()
        launched = self.executor.launch(out)
        assert isinstance(launched, QueuedStep)
        self._read_pending()
        self.pending = (out, launched)

    def abort(self, name: str) -> None:
        self.scheduler.finish_request(name, RequestStatus.FINISHED_ABORTED)
        self.executor.drop_request(name)

    def run(self, abort_after: dict[int, str] | None = None) -> dict[str, list[int]]:
        while self.scheduler.num_unfinished or self.pending is not None:
            self.step()
            self.steps += 1
            if abort_after and self.steps in abort_after:
                self.abort(abort_after[self.steps])
        return {name: list(r.output_token_ids) for name, r in self.requests.items()}

    def _read_pending(self) -> None:
        if self.pending is not None:
            (out, launched), self.pending = self.pending, None
            self._process(out, launched.result())

    def _process(self, out, result) -> None:
        assert set(result.sampled) <= {s.request.request_id for s in out.scheduled}
        for request in self.scheduler.update_from_output(out, result.sampled):
            self.executor.drop_request(request.request_id)


def _protocol_members() -> list[str]:
    names = {n for n in vars(Executor) if not n.startswith("_")}
    return sorted(names | set(Executor.__annotations__))


def test_it_is_an_executor_with_every_member_declared(executor):
    assert isinstance(executor, Executor)
    cls = type(executor)
    assert "__getattr__" not in vars(cls)  # nothing reached by forwarding
    for name in _protocol_members():
        assert hasattr(cls, name) or name in vars(executor), name
        wanted = getattr(Executor, name, None)
        if inspect.isfunction(wanted):  # the implementation accepts the Protocol's arguments
            have = inspect.signature(getattr(cls, name)).parameters
            for param in inspect.signature(wanted).parameters:
                assert param in have, f"{cls.__name__}.{name} lacks {param!r}"


@pytest.mark.parametrize("overlapped", [False, True], ids=["sync", "overlapped"])
def test_samples_the_reference_tokens_for_the_same_steps(executor, reference, overlapped):
    names = list(PROMPTS)
    expected = Driver(reference, names, overlapped=False).run()
    assert Driver(executor, names, overlapped).run() == expected
    assert all(len(expected[n]) == PROMPTS[n][1].max_tokens for n in names)


def test_penalties_and_kept_logits_cannot_overlap(executor):
    driver = Driver(executor, ["short", "penalized"], overlapped=False)
    out = driver.scheduler.schedule()
    assert not executor.can_overlap(out)  # penalties read every output token on the host
    driver._process(out, executor.execute(out))
    driver.abort("penalized")
    out = driver.scheduler.schedule()
    assert executor.can_overlap(out)
    executor.keep_logits = True
    try:
        assert not executor.can_overlap(out)
    finally:
        executor.keep_logits = False
    driver._process(out, executor.execute(out))
    driver.run()


def test_kept_logits_match_the_reference(executor, reference):
    logits = {}
    for name, runner in (("reference", reference), ("executor", executor)):
        runner.keep_logits = True
        try:
            driver = Driver(runner, ["short", "long"], overlapped=False)
            out = driver.scheduler.schedule()
            result = runner.execute(out)
            driver._process(out, result)
            driver.run()
        finally:
            runner.keep_logits = False
        assert set(result.logits) == set(result.sampled)
        logits[name] = result.logits
    for rid, row in logits["reference"].items():
        torch.testing.assert_close(logits["executor"][rid], row, rtol=1e-4, atol=1e-4)


def test_dropped_request_leaves_the_others_unchanged(executor, reference):
    """An abort mid-generation, as ``EngineCore.abort`` does it: the scheduler frees it, the executor
    forgets it; the others sample what they sample on the reference with the same abort."""
    names = ["short", "long", "seeded"]
    abort = {4: "seeded"}
    expected = Driver(reference, names, overlapped=True).run(abort)
    driver = Driver(executor, names, overlapped=True)
    got = driver.run(abort)
    assert got == expected
    assert 0 < len(got["seeded"]) < SEEDED.max_tokens
    executor.drop_request("seeded")  # twice, and an id never seen: both ignored
    executor.drop_request("no-such-request")
    assert Driver(executor, ["short"], overlapped=False).run()["short"] == expected["short"]


def test_step_events_are_settable(executor):
    executor.step_events = []
    try:
        Driver(executor, ["short"], overlapped=False).run()
        assert executor.step_events == []  # CUDA events only: none on CPU
    finally:
        executor.step_events = None
    assert executor.step_events is None


@pytest.mark.parametrize("kind", list(EXECUTORS))
def test_lifecycle_graphs_then_shutdown_leaves_no_child_process(model_dir, reference, live_executors, kind):
    ranks, cls, sizes = EXECUTORS[kind]
    live_executors.close()
    resource_tracker.ensure_running()  # spawn's helper process, shared by all: not the executor's
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    executor = _build(model_dir, kind)
    try:
        assert type(executor) is cls
        started = {p.pid for p in psutil.Process().children(recursive=True)} - before
        assert len(started) == ranks - 1  # one process per rank beyond this one
        assert executor.graphs is None
        executor.capture_decode_graphs(4, eager=True)
        graphs = "expert_parallel_size" not in sizes  # expert-parallel steps run eagerly
        assert (executor.graphs is not None) == graphs
        # MoE block graphs: one device's whole block only (a parallel block's collectives stay eager)
        assert (executor.capture_moe_graphs(TOKEN_BUDGET, eager=True) > 0) == (ranks == 1)
        expected = Driver(reference, ["short", "seeded"], overlapped=False).run()
        assert Driver(executor, ["short", "seeded"], overlapped=True).run() == expected
        if graphs:
            assert executor.graphs.steps_run > 0  # the decode steps replayed the (eager) graphs
        if ranks == 1:
            assert executor.moe_graphs.blocks_run > 0  # and the prefill steps' MoE blocks theirs
    finally:
        executor.shutdown()
    executor.shutdown()  # idempotent
    left = [
        p
        for p in psutil.Process().children(recursive=True)
        if p.pid not in before and p.status() != psutil.STATUS_ZOMBIE
    ]
    assert not left
