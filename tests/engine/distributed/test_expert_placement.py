import pytest
import torch

from engine.distributed.expert_placement import ExpertPlacement, RoutingWindow, _make_room, plan_placement

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def zipf_trace(num_experts: int = 64, top_k: int = 6, tokens: int = 20_000, s: float = 1.2, shuffle=False):
    """Tokens per expert when each token picks top_k distinct experts, expert i with weight 1 / (i+1)^s."""
    gen = torch.Generator().manual_seed(0)
    weights = 1.0 / torch.arange(1, num_experts + 1, dtype=torch.float64) ** s
    if shuffle:
        weights = weights[torch.randperm(num_experts, generator=gen)]
    ids = torch.multinomial(weights.expand(tokens, num_experts), top_k, replacement=False, generator=gen)
    return torch.bincount(ids.reshape(-1), minlength=num_experts).tolist()


@pytest.mark.parametrize(
    ("slots", "message"),
    [
        (((0, 1), (1, 1)), r"rank 1 holds expert\(s\) \[1\] more than once"),
        (((0, 1), (1, 2)), r"expert\(s\) \[3\] are on no rank"),
        (((0, 1, 2), (3,)), r"same number of slots, got \[3, 1\]"),
        (((0, 1), (2, 4)), "rank 1 holds expert 4, outside 0..3"),
    ],
)
def test_invalid_placements_are_refused(slots, message):
    with pytest.raises(ValueError, match=message):
        ExpertPlacement(4, slots)


def test_experts_must_split_evenly_over_the_ranks():
    with pytest.raises(ValueError, match="num_experts=6 is not divisible by num_ranks=4"):
        ExpertPlacement.contiguous(6, 4)
    with pytest.raises(ValueError, match="num_experts=6 is not divisible by num_ranks=4"):
        plan_placement([1.0] * 6, 4, 1)
    with pytest.raises(ValueError, match="5 slots per rank exceed the 4 experts"):
        ExpertPlacement.contiguous(4, 2, extra_slots=3)


def test_contiguous_shares_with_and_without_extra_slots():
    plain = ExpertPlacement.contiguous(8, 2)
    assert plain.slots == ((0, 1, 2, 3), (4, 5, 6, 7))
    assert (plain.num_ranks, plain.slots_per_rank) == (2, 4)
    # An extra slot copies the next rank's first expert, wrapping to rank 0's.
    extra = ExpertPlacement.contiguous(8, 2, extra_slots=1)
    assert extra.slots == ((0, 1, 2, 3, 4), (4, 5, 6, 7, 0))
    assert extra.replicas(0) == [(0, 0), (1, 4)]
    assert extra.replicas(4) == [(0, 4), (1, 0)]
    assert extra.replicas(5) == [(1, 1)]


@pytest.mark.parametrize("device", DEVICES)
def test_route_sends_each_pair_to_a_slot_holding_its_expert(device):
    placement = plan_placement([50, 1, 1, 1, 30, 1, 1, 1], num_ranks=2, extra_slots=1)
    gen = torch.Generator().manual_seed(0)
    topk_ids = torch.multinomial(torch.ones(40, 8), 3, generator=gen).to(device)
    rank, slot = placement.route(topk_ids)
    assert rank.shape == slot.shape == topk_ids.shape
    assert rank.dtype == slot.dtype == torch.int64 and rank.device == topk_ids.device
    table = torch.tensor(placement.slots, device=device)
    assert torch.equal(table[rank, slot], topk_ids)


@pytest.mark.parametrize("device", DEVICES)
def test_a_hot_experts_pairs_split_evenly_over_its_copies(device):
    placement = ExpertPlacement.contiguous(8, 2, extra_slots=1)  # experts 0 and 4 have two copies
    # Expert 0 is every token's first choice, so rules keyed on the (token, k) position alone would pile
    # it on one copy.
    topk_ids = torch.tensor([[0, 4 + t % 4] for t in range(15)], device=device)
    rank, _ = placement.route(topk_ids)
    for expert in (0, 4):
        ranks = rank[topk_ids == expert]
        assert abs(int((ranks == 0).sum()) - int((ranks == 1).sum())) <= 1, (expert, ranks.tolist())


def test_rank_loads_split_each_expert_over_its_copies():
    placement = ExpertPlacement.contiguous(4, 2, extra_slots=1)  # ((0, 1, 2), (2, 3, 0))
    assert placement.rank_loads([8, 1, 4, 2]) == [4 + 1 + 2, 2 + 2 + 4]
    assert placement.imbalance_ratio([8, 1, 4, 2]) == pytest.approx(8 / 7.5)
    assert placement.imbalance_ratio([0, 0, 0, 0]) == 1.0


@pytest.mark.parametrize("num_ranks", [4, 8])
def test_planner_with_one_extra_slot_halves_the_imbalance_of_a_skewed_trace(num_ranks):
    # Zipf popularity by id keeps the hot experts together in rank 0's share, which a contiguous split
    # suffers from. A 2x cut needs a contiguous imbalance of 2 or more, and shuffled popularity stays
    # below that (see the next test).
    load = zipf_trace()
    contiguous = ExpertPlacement.contiguous(64, num_ranks).imbalance_ratio(load)
    planned = plan_placement(load, num_ranks, extra_slots=1)
    ratio = planned.imbalance_ratio(load)
    print(f"{num_ranks} ranks: contiguous {contiguous:.3f}, planned with 1 extra slot {ratio:.3f}")
    assert contiguous == pytest.approx({4: 2.903, 8: 4.550}[num_ranks], abs=1e-3)
    assert ratio == pytest.approx({4: 1.000, 8: 1.001}[num_ranks], abs=1e-3)
    assert contiguous / ratio >= 2
    assert planned.slots_per_rank == 64 // num_ranks + 1


@pytest.mark.parametrize("num_ranks", [4, 8])
@pytest.mark.parametrize("shuffle", [False, True])
def test_planner_without_extra_slots_beats_contiguous_on_skewed_traces(num_ranks, shuffle):
    load = zipf_trace(shuffle=shuffle)
    contiguous = ExpertPlacement.contiguous(64, num_ranks).imbalance_ratio(load)
    planned = plan_placement(load, num_ranks, extra_slots=0)
    ratio = planned.imbalance_ratio(load)
    print(f"{num_ranks} ranks, shuffled={shuffle}: contiguous {contiguous:.3f}, planned {ratio:.3f}")
    assert planned.slots_per_rank == 64 // num_ranks
    assert ratio <= contiguous
    assert plan_placement(load, num_ranks, extra_slots=1).imbalance_ratio(load) < 1.01


def test_planner_gives_spare_copies_to_the_hottest_experts_and_is_deterministic():
    load = [100, 1, 1, 1, 60, 1, 1, 1]
    placement = plan_placement(load, num_ranks=2, extra_slots=1)
    assert placement == plan_placement(load, num_ranks=2, extra_slots=1)
    assert len(placement.replicas(0)) == len(placement.replicas(4)) == 2
    assert placement.slots_per_rank == 5
    # No load at all: the spare copies still spread over distinct experts.
    idle = plan_placement([0] * 8, num_ranks=4, extra_slots=1)
    assert sorted(len(idle.replicas(e)) for e in range(8)) == [1] * 4 + [2] * 4


def test_make_room_moves_an_expert_so_the_copy_fits():
    # Ranks 0 and 1 with room both hold expert 0 already; rank 2 is full.
    held, rank_load, weight = [[0, 1], [0, 2], [3, 4, 5]], [3.0, 3.0, 3.0], [2.0, 1.0, 1.0, 1.0, 1.0, 1.0]
    rank = _make_room(held, rank_load, weight, 0)
    assert rank == 2 and held == [[0, 1, 3], [0, 2], [4, 5]]
    assert rank_load == [4.0, 3.0, 2.0]


def test_routing_window_sums_the_last_steps_only():
    window = RoutingWindow(num_experts=3, window_steps=2)
    assert (window.steps, window.load()) == (0, [0, 0, 0])
    window.add([1, 0, 2])
    window.add(torch.tensor([0, 5, 0]))
    assert (window.steps, window.load()) == (2, [1, 5, 2])
    window.add([3, 3, 3])
    assert (window.steps, window.load()) == (2, [3, 8, 3])
    with pytest.raises(ValueError, match="expected 3 counts"):
        window.add([1, 2])


def test_json_round_trip():
    placement = plan_placement([5, 1, 9, 2, 0, 7, 3, 3], num_ranks=4, extra_slots=1)
    data = placement.to_json()
    assert data == {"num_experts": 8, "slots": [list(rank) for rank in placement.slots]}
    assert ExpertPlacement.from_json(data) == placement
