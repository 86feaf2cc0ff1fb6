"""The one drive loop on a real tiny engine core: what a turn applies, when it steps, what its sink
hears, when it ends; and the engine-core process's sink, which sends one batch per turn that
changed something and nothing when idle."""

from __future__ import annotations

import multiprocessing

import pytest

from engine import SamplingParams
from engine.config import EngineConfig
from engine.core.drive_loop import CommandQueue, drive, run_turn
from engine.core.engine_core import EngineCore
from engine.core.kv_forwarding import ForwardingKVEventLog
from engine.core.messages import AbortRequest, AddRequest, OutputBatch, Stop
from engine.core.process_loop import BatchSender, Outbox

LONG = SamplingParams(max_tokens=50, ignore_eos=True, temperature=0.0)


class Turns:
    """A sink that keeps every turn's outputs and refusals."""

    def __init__(self) -> None:
        self.turns: list[tuple[list, list]] = []

    def __call__(self, outputs, refusals) -> None:
        self.turns.append((list(outputs), list(refusals)))

    def outputs(self, rid: str) -> list:
        return [o for outs, _ in self.turns for o in outs if o.request_id == rid]


@pytest.fixture(scope="module")
def core(tiny_qwen3) -> EngineCore:
    return EngineCore(EngineConfig(model_dir=tiny_qwen3, device="cpu", dtype="float32"))


def add(rid: str, prompt=(5, 6, 7), params=LONG, final_only=False) -> AddRequest:
    return AddRequest(rid, list(prompt), params, None, 0.0, final_only)


def test_a_queue_that_does_not_wait_ends_the_loop_once_idle(core):
    sink, commands = Turns(), CommandQueue(waits=False)
    drive(core, commands, sink)
    assert sink.turns == []  # idle from the start: no step, no report
    commands.put(add("a", params=SamplingParams(max_tokens=3, ignore_eos=True)))
    drive(core, commands, sink)
    outs = sink.outputs("a")
    assert [len(o.new_token_ids) for o in outs] == [1, 1, 1] and outs[-1].finished
    assert len(sink.turns) == 3 and not core.has_unfinished()


def test_an_abort_in_the_same_turn_as_its_add_ends_it_before_any_step(core):
    sink, commands = Turns(), CommandQueue(waits=False)
    commands.put(add("b"))
    commands.put(AbortRequest("b"))
    commands.put(AbortRequest("never-added"))  # nothing to end: no output
    assert run_turn(core, commands, sink)
    [(outputs, refusals)] = sink.turns
    assert [(o.request_id, o.finish_reason, o.token_ids) for o in outputs] == [("b", "abort", [])]
    assert refusals == [] and not core.has_unfinished()


def test_an_add_the_core_refuses_reaches_the_sink_and_the_rest_runs_on(core):
    sink, commands = Turns(), CommandQueue(waits=False)
    commands.put(add("c", params=SamplingParams(max_tokens=2, ignore_eos=True)))
    commands.put(add("c"))  # the same id while the first is unfinished
    commands.put(add("d", prompt=[]))  # what admission would have refused in the front end
    drive(core, commands, sink)
    refusals = [r for _, rs in sink.turns for r in rs]
    assert [rid for rid, _ in refusals] == ["c", "d"]
    assert "already in use" in refusals[0][1] and "prompt is empty" in refusals[1][1]
    assert sink.outputs("c")[-1].finished and len(sink.outputs("c")[-1].token_ids) == 2


def test_stop_ends_the_turn_before_the_commands_behind_it(core):
    sink, commands = Turns(), CommandQueue(waits=True)
    commands.put(add("e"))
    commands.put(Stop())
    commands.put(add("f"))
    drive(core, commands, sink)  # a waiting queue: only Stop ends the loop
    assert sink.turns == [] and core.has_unfinished()
    assert commands.get(block=False) == add("f")
    commands.put(AbortRequest("e"))
    commands.put(Stop())
    drive(core, commands, sink)
    assert not core.has_unfinished()


def test_an_unknown_command_raises(core):
    commands = CommandQueue(waits=False)
    commands.put("not a command")
    with pytest.raises(RuntimeError, match="unknown command from the front end"):
        run_turn(core, commands, Turns())


def test_the_core_process_sink_sends_a_batch_only_for_a_turn_that_changed_something(tiny_qwen3):
    kv_log = ForwardingKVEventLog(64)
    core = EngineCore(EngineConfig(model_dir=tiny_qwen3, device="cpu", dtype="float32"), kv_events=kv_log)
    received, sent = multiprocessing.Pipe(duplex=False)
    send = BatchSender(core, Outbox(sent), kv_log)
    send([], [])
    first = received.recv()  # the first turn reports the stats it starts from
    assert isinstance(first, OutputBatch) and first.outputs == [] and first.stats == core.stats()
    send([], [])
    assert not received.poll(0)  # an idle turn: silent
    commands = CommandQueue(waits=False)
    commands.put(add("g", prompt=list(range(100, 140)), params=SamplingParams(max_tokens=2, ignore_eos=True)))
    commands.put(add("h", prompt=[]))
    assert run_turn(core, commands, send)
    batch = received.recv()
    assert [d.request_id for d in batch.outputs] == ["g"] and batch.outputs[0].finish_reason is None
    assert [rid for rid, _ in batch.errors] == ["h"]
    assert batch.kv_changes and batch.stats.num_running == 1 and batch.stats.generation_tokens == 1
    drive(core, commands, send)
    last = received.recv()
    assert last.outputs[0].finish_reason == "length" and last.stats.num_running == 0
    assert not received.poll(0)
