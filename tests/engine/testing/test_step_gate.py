"""The step gate holds the engine between steps while every request has the tokens it may have,
and lets it go when the test moves or removes the gate; an offline engine honours it too."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import pytest

from engine import LLM, SamplingParams
from engine.testing import step_gate
from engine.testing.step_gate import StepGate
from tests.support.waiting import wait_until


@dataclass
class Generating:
    output_token_ids: list[int] = field(default_factory=list)


@pytest.fixture
def gate(tmp_path, monkeypatch) -> StepGate:
    gate = StepGate(tmp_path / "step-gate")
    monkeypatch.setattr(step_gate, "_gate_file", str(gate.path))  # what the env var sets at import
    return gate


def held_in_a_thread(requests) -> threading.Thread:
    thread = threading.Thread(target=step_gate.hold, args=(requests,), daemon=True)
    thread.start()
    return thread


def test_without_a_gate_hold_returns_at_once(monkeypatch):
    monkeypatch.setattr(step_gate, "_gate_file", None)
    step_gate.hold([Generating([1, 2, 3])])


def test_an_absent_gate_file_or_no_request_does_not_hold(gate):
    step_gate.hold([Generating()])
    gate.hold_at(0)
    step_gate.hold([])


def test_holds_while_every_request_has_its_tokens_and_goes_on_when_moved(gate):
    gate.hold_at(2)
    step_gate.hold([Generating([1]), Generating([1, 2, 3])])  # one request still may take a token
    thread = held_in_a_thread([Generating([1, 2]), Generating([1, 2, 3])])
    assert thread.is_alive()
    gate.hold_at(3)
    wait_until(lambda: not thread.is_alive(), "the gate moved to 3 to let the step go")


def test_opening_the_gate_lets_the_step_go(gate):
    gate.hold_at(0)
    thread = held_in_a_thread([Generating()])
    assert thread.is_alive()
    gate.open()
    wait_until(lambda: not thread.is_alive(), "the opened gate to let the step go")


def test_an_offline_engine_generates_exactly_up_to_the_gate(gate, tiny_qwen3):
    gate.hold_at(3)
    params = SamplingParams(max_tokens=8, temperature=0.0, ignore_eos=True)
    with LLM(tiny_qwen3, device="cpu", dtype="float32") as llm:
        outputs = []
        worker = threading.Thread(target=lambda: outputs.extend(llm.generate("def main(", params)))
        worker.start()
        wait_until(lambda: llm.engine.generation_tokens == 3, "the engine to generate 3 tokens")
        assert worker.is_alive() and llm.engine.generation_tokens == 3  # held there
        gate.open()
        worker.join(60)
    assert len(outputs[0].token_ids) == 8
