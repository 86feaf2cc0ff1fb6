"""The step gate holds the engine while every unfinished request has the tokens it may have, and
lets it go when the test moves or removes the gate; an engine it holds still admits new requests."""

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


def test_without_a_gate_nothing_is_held(monkeypatch):
    monkeypatch.setattr(step_gate, "_gate_file", None)
    assert not step_gate.holds([Generating([1, 2, 3])])


def test_an_absent_gate_file_or_no_request_holds_nothing(gate):
    assert not step_gate.holds([Generating()])
    gate.hold_at(0)
    assert not step_gate.holds([])


def test_holds_while_every_request_has_its_tokens_until_moved_or_opened(gate):
    gate.hold_at(2)
    assert not step_gate.holds([Generating([1]), Generating([1, 2, 3])])  # one may take a token
    assert step_gate.holds([Generating([1, 2]), Generating([1, 2, 3])])
    gate.hold_at(3)
    assert not step_gate.holds([Generating([1, 2]), Generating([1, 2, 3])])
    gate.hold_at(0)
    assert step_gate.holds([Generating()])
    gate.open()
    assert not step_gate.holds([Generating()])


def test_an_offline_engine_generates_up_to_the_gate_and_on_when_opened(gate, tiny_qwen3):
    gate.hold_at(3)
    params = SamplingParams(max_tokens=8, temperature=0.0, ignore_eos=True)
    with LLM(tiny_qwen3, device="cpu", dtype="float32") as llm:
        outputs = []
        worker = threading.Thread(target=lambda: outputs.extend(llm.generate("def main(", params)))
        worker.start()
        wait_until(lambda: llm.engine.generation_tokens == 3, "the engine to generate 3 tokens")
        assert worker.is_alive()  # held at 3 of its 8 tokens
        gate.open()
        worker.join(60)
    assert len(outputs[0].token_ids) == 8
