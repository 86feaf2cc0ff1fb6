"""Grammar-constrained sampling in the engine (tiny model, CPU): the request waits in the scheduler
while its grammar compiles, the mask holds every step, a grammar cut short ends with "length", and
compiled grammars are cached by spec."""

from __future__ import annotations

import json
import re
import threading

import pytest

from engine import LLM, SamplingParams
from engine.structured.spec import StructuredSpec, check

SCHEMA = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 9}},
          "required": ["n"], "additionalProperties": False}  # fmt: skip


@pytest.fixture(scope="module")
def llm(tiny_checkpoint):
    return LLM(tiny_checkpoint, device="cpu", dtype="float32")


def test_random_model_output_matches_regex_schema_and_choice(llm):
    specs = [
        StructuredSpec("regex", "[a-c]{3}-[0-9]{2}"),
        StructuredSpec.json_schema(SCHEMA),
        StructuredSpec.choice(["alpha", "beta"]),
        StructuredSpec("grammar", 'root ::= "x" ("y" | "z")'),
    ]
    params = [
        SamplingParams(max_tokens=40, temperature=1.0, seed=i, structured=s) for i, s in enumerate(specs)
    ]
    regex, schema, choice, grammar = llm.generate(["Once upon a time"] * 4, params)
    assert re.fullmatch("[a-c]{3}-[0-9]{2}", regex.text) and regex.finish_reason == "stop"
    if schema.finish_reason == "stop":
        assert 0 <= json.loads(schema.text)["n"] <= 9
    assert choice.text in ("alpha", "beta") and grammar.text in ("xy", "xz")


def test_unsatisfiable_within_max_tokens_ends_with_length(llm):
    spec = StructuredSpec("regex", "a{50}")
    (out,) = llm.generate(["Once"], SamplingParams(max_tokens=3, temperature=0.0, structured=spec))
    assert out.finish_reason == "length" and len(out.token_ids) == 3


def test_a_request_waits_for_its_grammar_and_others_run_meanwhile(llm):
    engine = llm.engine
    pool = engine.grammar_pool()
    release = threading.Event()
    spec = StructuredSpec("regex", "[0-9]{4}")
    original = pool._compile
    pool._compile = lambda s: (release.wait(60), original(s))[1]  # a slow compilation
    try:
        waiting = engine.add_request("Once", SamplingParams(max_tokens=8, temperature=0.0, structured=spec))
        free = engine.add_request("Once", SamplingParams(max_tokens=2, temperature=0.0))
        finished: dict[str, str] = {}
        while free not in finished:
            for out in engine.step():
                if out.finished:
                    finished[out.request_id] = out.text
        assert waiting not in finished and engine.scheduler.waiting  # still compiling
        release.set()
        while waiting not in finished:
            for out in engine.step():
                if out.finished:
                    finished[out.request_id] = out.text
        assert re.fullmatch("[0-9]{4}", finished[waiting])
    finally:
        pool._compile = original
        release.set()
    assert pool.compiled(spec) is pool.compiled(StructuredSpec("regex", "[0-9]{4}"))  # cached by spec


def test_invalid_specs_raise_the_compilers_message():
    for spec, message in ((StructuredSpec("regex", "(ab"), "parenthesis"),
                          (StructuredSpec.json_schema({"type": "frob"}), "Unsupported type")):  # fmt: skip
        with pytest.raises(ValueError, match=message):
            check(spec)


def test_a_grammar_that_fails_to_compile_aborts_its_request(llm):
    engine = llm.engine
    pool = engine.grammar_pool()
    original = pool._compile

    def broken(spec):
        raise RuntimeError("compiler fault")

    pool._compile = broken
    try:
        rid = engine.add_request(
            "Once", SamplingParams(max_tokens=4, structured=StructuredSpec("regex", "q{3}"))
        )
        outputs = []
        while engine.has_unfinished():
            outputs += engine.step()
    finally:
        pool._compile = original
    [out] = [o for o in outputs if o.request_id == rid]
    assert out.finished and out.finish_reason == "abort" and out.token_ids == []
