"""Speculative decoding beside and under structured outputs, on the real SmolLM2-135M-Instruct (CPU):
a constrained request keeps its grammar in a step that verifies another request's drafts, and a
constrained request's own drafts are verified under its grammar, with the greedy tokens of the same
requests without speculation."""

import json
import re

import pytest

from engine import LLM, SamplingParams
from engine.structured.spec import StructuredSpec
from engine.testing.smollm2 import smollm2_path

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]
QUOTE = "Repeat exactly: 'The quick brown fox jumps over the lazy dog. The quick brown fox jumps over the lazy dog.'"
NUMBER = "Give me a number."
SCHEMA = {
    "type": "object",
    "properties": {"animal": {"type": "string"}, "colour": {"type": "string"}},
    "required": ["animal", "colour"],
}
RECORD = 'Repeat this JSON exactly: {"animal": "fox", "colour": "brown"}'


def _run(speculative: bool, prompts: list[str], params: list[SamplingParams]):
    extra = {"speculative_method": "ngram"} if speculative else {}
    llm = LLM(str(smollm2_path()), device="cpu", dtype="float32", **extra)
    encoded = [llm.tokenizer.encode_chat([{"role": "user", "content": p}]) for p in prompts]
    outputs = llm.generate(encoded, params)
    return outputs, llm.stats()


def test_a_constrained_request_keeps_its_grammar_in_a_step_verifying_other_drafts():
    """Before, the verify step sampled every row without grammar masks: the regex request beside a
    speculating one came out as six digits."""
    params = [
        SamplingParams(max_tokens=24, temperature=0.0, ignore_eos=True),
        SamplingParams(max_tokens=12, temperature=0.0, structured=StructuredSpec("regex", "[0-9]{5}")),
    ]
    speculating, stats = _run(True, [QUOTE, NUMBER], params)
    plain, _ = _run(False, [QUOTE, NUMBER], params)
    assert stats.spec_decode_num_accepted_tokens > 0  # the quoting request's drafts were verified
    assert re.fullmatch("[0-9]{5}", speculating[1].text), speculating[1].text
    assert [o.token_ids for o in speculating] == [o.token_ids for o in plain]


def test_a_constrained_requests_own_drafts_are_verified_under_its_grammar():
    params = [SamplingParams(max_tokens=40, temperature=0.0, structured=StructuredSpec.json_schema(SCHEMA))]
    speculating, stats = _run(True, [RECORD], params)
    plain, _ = _run(False, [RECORD], params)
    assert stats.spec_decode_num_draft_tokens > 0 and stats.spec_decode_num_accepted_tokens > 0
    assert speculating[0].token_ids == plain[0].token_ids
    assert set(json.loads(speculating[0].text)) == {"animal", "colour"}
