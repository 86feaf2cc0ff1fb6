from collections import Counter

import pytest

from gateway.bench.workload import WorkloadShape, build_workload, total_requests


def test_same_seed_same_workload_and_the_requested_mix():
    shape = WorkloadShape(requests=100)
    first, again, other = build_workload(shape, 3), build_workload(shape, 3), build_workload(shape, 4)
    assert first == again and first != other
    assert total_requests(first) == 100
    turns = Counter()
    for session in first:
        turns[session.kind] += len(session.turns)
    assert turns == {"popular": 10, "group": 35, "conversation": 45, "unique": 10}
    popular = {s.system for s in first if s.kind == "popular"}
    assert len(popular) == 1  # one hot prefix
    documents = Counter(s.system for s in first if s.kind == "group")
    assert len(documents) == round(35 / shape.requests_per_group)
    assert max(documents.values()) - min(documents.values()) <= 1
    assert max(len(s.turns) for s in first if s.kind == "conversation") == shape.turns_per_conversation


def test_arrivals_are_poisson_at_the_requested_rate_and_fixed_by_the_seed():
    shape = WorkloadShape(requests=400, rate=4.0, think_s=0.5)
    sessions = build_workload(shape, 1)
    starts = [s.start_s for s in sessions]
    assert starts == sorted(starts) and starts[0] == 0.0
    # Sessions arrive at rate * sessions / requests; all requests' first turns by the last start.
    session_rate = len(sessions) / starts[-1]
    assert session_rate == pytest.approx(4.0 * len(sessions) / 400, rel=0.2)
    thinks = [t.think_s for s in sessions for t in s.turns[1:]]
    assert thinks and sum(thinks) / len(thinks) == pytest.approx(0.5, rel=0.25)
    assert all(s.turns[0].think_s == 0.0 for s in sessions)
    assert [s.start_s for s in build_workload(shape, 1)] == starts


def test_bad_shape_is_refused():
    with pytest.raises(ValueError, match="shares"):
        WorkloadShape(popular_share=0.7, group_share=0.5)
    with pytest.raises(ValueError, match="requests"):
        WorkloadShape(requests=0)
    with pytest.raises(ValueError, match="rate"):
        WorkloadShape(rate=0)
