"""The benchmarks' oracle drafts at every step with calibrated confidence, and the forced acceptance
accepts each draft position with probability p, up to the first rejection, fixed per (prompt, position)."""

from engine.scheduler.request import Request
from engine.spec.forced_acceptance import ForcedAcceptance
from engine.spec.oracle import OracleProposer

VOCAB = 1000


def _request(prompt: list[int], outputs: int) -> Request:
    request = Request(
        request_id=f"r{prompt[0]}", prompt_token_ids=prompt, max_tokens=10_000, output_token_ids=[5] * outputs
    )
    request.num_output_placeholders = 1  # as in a step: the token it samples
    return request


def test_the_oracle_drafts_every_request_at_every_step_with_calibrated_confidence():
    oracle = OracleProposer(0.7, VOCAB, seed=3)
    requests = [_request([i, i + 1], i) for i in range(8)]
    for _ in range(200):
        drafts = oracle.propose(requests, 5)
        assert set(drafts) == {r.request_id for r in requests}
        for draft in drafts.values():
            assert len(draft.token_ids) == 5 and all(0 <= t < VOCAB for t in draft.token_ids)
            assert draft.confidence == [0.7 ** (i + 1) for i in range(5)] and draft.calibrated
    uncalibrated = OracleProposer(0.7, VOCAB, confidence="none").propose(requests, 3)["r0"]
    assert uncalibrated.confidence == [1.0] * 3 and not uncalibrated.calibrated
    assert oracle.propose(requests, 0) == {}


def test_forced_acceptance_is_p_per_position_up_to_the_first_rejection():
    forced = ForcedAcceptance(0.7, seed=3)
    k, tried, accepted, prefixes = 5, [0] * 5, [0] * 5, []
    for prompt in range(40):
        for outputs in range(0, 500, 5):
            n = forced.accepted_prefix(_request([prompt, 9], outputs), k)
            prefixes.append(n)
            for i in range(min(n + 1, k)):  # positions up to the first rejection are decided
                tried[i] += 1
                accepted[i] += i < n
    for i in range(k):
        assert abs(accepted[i] / tried[i] - 0.7) < 0.05, (i, accepted[i] / tried[i])
    # Fixed per (seed, prompt, position): the same decisions again, another seed others.
    again = ForcedAcceptance(0.7, seed=3)
    assert [again.accepted_prefix(_request([0, 9], o), k) for o in range(0, 500, 5)] == prefixes[:100]
    other = ForcedAcceptance(0.7, seed=4)
    assert [other.accepted_prefix(_request([0, 9], o), k) for o in range(0, 500, 5)] != prefixes[:100]
    assert ForcedAcceptance(1.0).accepted_prefix(_request([1], 0), k) == k
    assert ForcedAcceptance(0.0).accepted_prefix(_request([1], 0), k) == 0
