from collections import Counter

import pytest

from engine.gateway.bench.workload import WorkloadShape, build_workload, total_requests


def test_same_seed_same_workload_and_the_requested_mix():
    shape = WorkloadShape(requests=100)
    first, again, other = build_workload(shape, 3), build_workload(shape, 3), build_workload(shape, 4)
    assert first == again and first != other
    assert total_requests(first) == 100
    turns = Counter()
    for session in first:
        turns[session.kind] += len(session.turns)
    assert turns == {"popular": 10, "group": 30, "conversation": 45, "unique": 15}
    popular = {s.system for s in first if s.kind == "popular"}
    assert len(popular) == 1  # one hot prefix
    assert len({s.system for s in first if s.kind == "group"}) <= shape.groups
    assert max(len(s.turns) for s in first if s.kind == "conversation") == shape.turns_per_conversation


def test_bad_shape_is_refused():
    with pytest.raises(ValueError, match="shares"):
        WorkloadShape(popular_share=0.7, group_share=0.5)
    with pytest.raises(ValueError, match="requests"):
        WorkloadShape(requests=0)
