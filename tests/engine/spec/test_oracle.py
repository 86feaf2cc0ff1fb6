"""The benchmarks' oracle proposer drafts the recorded tokens, each right with probability p."""

from engine.scheduler.request import Request
from engine.spec.oracle import OracleProposer

VOCAB = 1000


def _request(prompt: list[int], output: list[int]) -> Request:
    return Request(
        request_id=f"r{prompt[0]}", prompt_token_ids=prompt, max_tokens=10_000, output_token_ids=output
    )


def test_per_token_acceptance_is_p_and_confidence_is_calibrated():
    recorded = {(i, i + 1): [(7 * i + j) % VOCAB for j in range(500)] for i in range(8)}
    oracle = OracleProposer(recorded, 0.7, VOCAB, seed=3)
    right = total = 0
    for prompt, tokens in recorded.items():
        for position in range(0, 500, 5):
            draft = oracle.propose([_request(list(prompt), tokens[:position])], 5)[f"r{prompt[0]}"]
            assert draft.confidence == [0.7 ** (i + 1) for i in range(len(draft.token_ids))]
            expected = tokens[position : position + 5]
            right += sum(d == t for d, t in zip(draft.token_ids, expected, strict=True))
            total += len(draft.token_ids)
    assert total == 4000 and abs(right / total - 0.7) < 0.03
    # The same seed draws the same wrong positions; a request off its recording gets no drafts.
    again = OracleProposer(recorded, 0.7, VOCAB, seed=3, confidence="none")
    first = _request([0, 1], recorded[(0, 1)][:10])
    assert again.propose([first], 5)["r0"].token_ids == oracle.propose([first], 5)["r0"].token_ids
    assert again.propose([first], 5)["r0"].confidence == [1.0] * 5
    off_record = _request([1, 2], [recorded[(1, 2)][0] + 1])
    assert again.propose([off_record], 5) == {} and again.diverged == {"r1"}
