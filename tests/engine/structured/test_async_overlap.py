"""Grammar-constrained steps under async scheduling: the same greedy tokens as the synchronous
engine, and each step's forward is queued before the step in flight is read (its tokens accepted),
the masks filled only after that."""

from __future__ import annotations

import json
import re

from engine import LLM, SamplingParams
from engine.structured.spec import StructuredSpec

SCHEMA = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 9}},
          "required": ["n"], "additionalProperties": False}  # fmt: skip
SPECS = [
    StructuredSpec("regex", "[a-c]{2}"),  # ends after a few tokens
    StructuredSpec("regex", "[0-9]{9}"),  # ends later
    StructuredSpec.json_schema(SCHEMA),
    StructuredSpec.choice(["alpha", "beta"]),
    None,  # free in the same batch
    StructuredSpec("regex", "[a-z]{200}"),  # cut by max_tokens
]


def _generate(model, async_scheduling: bool, spy: bool = False):
    llm = LLM(model, device="cpu", dtype="float32", async_scheduling=async_scheduling)
    core, events = llm.engine, []
    if spy:
        runner = core.runner
        launch, process, model = runner.launch, core._process_pending, runner.model
        decode, forward = model.decode_logits, model.forward

        def spied_launch(out, **kwargs):
            events.append(("launch", core._pending is not None, "before_sampling" in kwargs))
            return launch(out, **kwargs)

        runner.launch = spied_launch
        core._process_pending = lambda: events.append(("process",)) or process()
        model.decode_logits = lambda *a: events.append(("forward",)) or decode(*a)
        model.forward = lambda *a: events.append(("forward",)) or forward(*a)
    params = [SamplingParams(max_tokens=14, temperature=0.0, structured=spec) for spec in SPECS]
    outs = llm.generate(["Once upon a time"] * len(SPECS), params)
    assert core.kv.pool.num_used_blocks == 0 and not core.has_unfinished()
    return [(o.token_ids, o.text, o.finish_reason) for o in outs], events


def test_constrained_batch_gives_the_synchronous_tokens_with_overlapped_steps(tiny_checkpoint):
    sync, _ = _generate(tiny_checkpoint, async_scheduling=False)
    overlapped, events = _generate(tiny_checkpoint, async_scheduling=True, spy=True)
    assert overlapped == sync
    (ab, ab_reason), (digits, _), (doc, doc_reason), (choice, _), _, (xs, xs_reason) = [o[1:] for o in sync]
    assert re.fullmatch("[a-c]{2}", ab) and ab_reason == "stop"
    assert re.fullmatch("[0-9]{9}", digits) or len(digits) < 9
    if doc_reason == "stop":
        assert 0 <= json.loads(doc)["n"] <= 9
    assert choice in ("alpha", "beta") and re.fullmatch("[a-z]+", xs) and xs_reason == "length"
    assert len({len(tokens) for tokens, *_ in sync}) > 1  # the rows end at different steps
    # Every launch with a step in flight (all of them carry grammar rows) queues the forward first,
    # then reads the step in flight, inside the launch; none reads it before launching.
    overlapped_launches = 0
    for i, event in enumerate(events):
        if event[0] == "launch" and event[1]:
            assert event[2] and events[i + 1 : i + 3] == [("forward",), ("process",)]
            overlapped_launches += 1
    assert overlapped_launches >= 10
