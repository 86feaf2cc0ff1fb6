"""Every proposer keeps the ``Proposer`` contract: drafts continue the request's verified tokens,
are at most ``max_len`` long, carry a non-increasing confidence in [0, 1] per token, are token ids
of the vocabulary, come out the same when asked twice, and ``drop`` forgets a request (unknown ids
too). Run against n-gram lookup, a draft model and DeepSeek-V3's MTP layer."""

import pytest

from engine import LLM, SamplingParams
from engine.scheduler.request import Request
from engine.spec.proposer import Draft, Proposer

REPEATING = [11, 12, 13, 14, 15, 16, 17, 18] * 3


@pytest.fixture(params=["ngram", "draft_model", "mtp"])
def engine(request, tiny_models):
    model = tiny_models["deepseek_v3" if request.param == "mtp" else "llama"]
    extra = {"speculative_model": str(tiny_models["llama"])} if request.param == "draft_model" else {}
    llm = LLM(model, device="cpu", dtype="float32", speculative_method=request.param, **extra)
    return llm.engine


def _decoding_request(engine):
    """A request whose prompt ran through the target and whose next token is known on the host
    (n-gram lookup needs no model state: the prompt alone, which ends in a repeat)."""
    if engine.config.speculative_method == "ngram":
        return Request("r", list(REPEATING), max_tokens=8, sampling_params=SamplingParams(temperature=0.0))
    rid = engine.add_request(REPEATING, SamplingParams(max_tokens=8, temperature=0.0, ignore_eos=True))
    engine.speculator.propose = lambda running: None  # keep the engine from drafting by itself
    engine.step()
    request = engine.scheduler.requests[rid]
    assert request.num_computed_tokens == request.num_tokens - 1
    return request


def test_a_proposer_keeps_the_contract(engine):
    proposer = engine.speculator.proposer
    assert isinstance(proposer, Proposer)
    request = _decoding_request(engine)
    history = list(request.all_token_ids)
    drafts = proposer.propose([request], 3)
    assert set(drafts) <= {request.request_id}
    assert drafts, "a repeating prompt gets a draft from every proposer"
    draft = drafts[request.request_id]
    assert isinstance(draft, Draft)
    assert 1 <= len(draft.token_ids) <= 3
    assert all(0 <= t < engine.model_config.vocab_size for t in draft.token_ids)
    assert all(0.0 <= c <= 1.0 for c in draft.confidence)
    assert draft.confidence == sorted(draft.confidence, reverse=True)
    assert request.all_token_ids == history  # proposing never touches the verified tokens
    again = proposer.propose([request], 3)
    assert again[request.request_id].token_ids == draft.token_ids
    assert len(proposer.propose([request], 1)[request.request_id].token_ids) == 1
    proposer.drop(request.request_id)
    proposer.drop("no-such-request")


def test_ngram_lookup_proposes_what_followed_the_latest_match():
    from engine.spec.ngram import lookup

    assert lookup([1, 2, 3, 4, 5, 1, 2, 3], 2, 4, 2) == [4, 5]
    assert lookup([1, 2, 3, 9, 1, 2, 3, 7, 1, 2, 3], 5, 4, 2) == [7, 1, 2, 3]  # the latest match wins
    assert lookup([1, 2, 3, 4], 3, 4, 2) == []  # no n-gram of two or more recurs
    assert lookup([5], 3, 4, 2) == []
