"""The speculator under async scheduling (``tests/support/spec_loop.py``): a step that ``wants_drafts``
approves runs synchronously, so it should end with drafts; one policy decision per step."""

import pytest

from engine.spec.oracle import OracleProposer
from engine.spec.policy import REASK_WAIT, SpeculationPolicy, StepTimeModel
from engine.spec.speculator import PlainStepObserver, Speculator
from tests.support.spec_loop import AsyncLoop, decoding_requests

STEPS = 300


def _line(a: float, b: float) -> StepTimeModel:
    model = StepTimeModel()
    for tokens in (1, 8, 32, 64, 128, 256, 512, 1024) * 2:
        model.observe(tokens, a + b * tokens)
    return model


def _break_even_verify(batch: int, gain: float) -> tuple[float, float]:
    """A verify step a + b*T at which a first draft token of ``gain`` just pays at ``batch``
    decodes: g * t(T) = T * b (the marginal rule)."""
    b = 0.00002
    return batch * b / gain - batch * b, b


@pytest.mark.parametrize("batch", [64, 128, 256])
@pytest.mark.parametrize("break_even", [0.21, 0.3, 0.45])
@pytest.mark.parametrize("confidence", ["calibrated", "none"])
def test_steps_approved_for_drafts_end_with_drafts(batch, break_even, confidence):
    """Acceptance 0.2 where a draft token pays from a slightly higher one (session 19's DeepSeek
    batch 128: 57 of 57 synchronous steps without a draft): pays_at's evidence, relaxed toward the
    prior, says yes; the proposer's confidence then says no. After such a step pays_at waits."""
    a, b = _break_even_verify(batch, break_even)
    policy = SpeculationPolicy(5, step_time=_line(a, b))
    speculator = Speculator(OracleProposer(0.2, 1000, confidence=confidence), policy, 8192)
    loop = AsyncLoop(
        speculator, decoding_requests(batch), lambda t: 0.8 * (a + b * t), lambda t: a + b * t, 0.2
    )
    counts = loop.run(STEPS)
    # per request, a backoff of 1, 2, 4 .. REASK_WAIT decisions, then one refusal in REASK_WAIT
    assert counts.steps_without_drafts <= STEPS // REASK_WAIT + REASK_WAIT.bit_length()
    assert counts.plain_steps >= STEPS - counts.drafting_steps  # the rest stayed overlapped


def test_one_policy_decision_per_step():
    policy = SpeculationPolicy(5, step_time=_line(0.007, 0.00001))
    speculator = Speculator(OracleProposer(0.8, 1000), policy, 8192)
    loop = AsyncLoop(speculator, decoding_requests(4), lambda t: 0.006, lambda t: 0.007 + 0.00001 * t, 0.8)
    counts = loop.run(50)
    assert counts.verify_steps > 0 and policy._clock == counts.steps


def test_a_plain_step_observer_never_drafts_and_measures_every_plain_step():
    policy = SpeculationPolicy(5)
    observer = PlainStepObserver(policy, 8192)
    loop = AsyncLoop(observer, decoding_requests(128), lambda t: 0.013, lambda t: 0.03, 0.8)
    counts = loop.run(20)
    assert counts.drafting_steps == 0 and counts.plain_steps == 20  # every step overlapped
    assert policy.plain_step_time.steps == 20 and policy.step_time.steps == 0
    assert policy.plain_time(128) == pytest.approx(0.013)


@pytest.mark.parametrize("scheduling", ["fixed", "confidence"])
def test_no_draft_reaches_past_max_tokens(scheduling):
    """A step emits at most its draft plus one token: a request 3 tokens from its end drafts at most
    2, one a token from its end none (its verify rows and their gains would be past the end)."""
    policy = SpeculationPolicy(5, scheduling, step_time=_line(0.007, 0.00001))
    speculator = Speculator(OracleProposer(0.9, 1000), policy, 8192)
    requests = decoding_requests(3)
    for request, left in zip(requests, (3, 1, 50), strict=True):
        request.output_token_ids = [7] * 10
        request.max_tokens = 10 + left
    assert [Speculator.room(r) for r in requests] == [2, 0, 49]
    speculator.propose(requests)
    assert [len(r.draft_token_ids) <= room for r, room in zip(requests, (2, 0, 5), strict=True)] == [True] * 3
    assert requests[1].draft_token_ids == []
    if scheduling == "fixed":
        assert [len(r.draft_token_ids) for r in requests] == [2, 0, 5]
