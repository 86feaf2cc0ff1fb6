"""Draft tokens in the scheduler and the KV manager, on plain Python objects: a decode feeds its
draft after its last token within the budget and short of max_tokens, the accepted prefix is
appended (stopping at a stop token), and the rejected rest is rolled back: ``num_computed_tokens``
steps back, blocks past the verified tokens return to the pool, and no block holding an unverified
token is ever hashed into the prefix cache."""

from engine.kv.kv_manager import KVCacheManager
from engine.scheduler.request import Request
from engine.scheduler.scheduler import Scheduler


def _decoding(budget=32, max_tokens=20, num_blocks=32, **kw):
    kv = KVCacheManager(num_blocks, 4, True)
    sched = Scheduler(kv, budget, 8)
    request = Request("r", [1, 2, 3, 4, 5, 6], max_tokens=max_tokens, **kw)
    sched.add_request(request)
    out = sched.schedule()
    sched.update_from_output(out, {"r": 7})  # prompt done, first token known: a decode from here
    return sched, kv, request


def test_a_draft_rides_after_the_last_token_and_is_cut_to_the_budget():
    sched, _, request = _decoding()
    sched.max_num_batched_tokens = 4
    request.draft_token_ids = [8, 9, 10, 11, 12]
    out = sched.schedule()
    (s,) = out.scheduled
    assert (s.start, s.num_tokens, s.token_ids, s.num_draft_tokens) == (6, 4, [7, 8, 9, 10], 3)
    assert s.draft_token_ids == [8, 9, 10] and request.draft_token_ids == []


def test_a_draft_never_reaches_past_max_tokens():
    sched, _, request = _decoding(max_tokens=3)
    request.draft_token_ids = [8, 9, 10, 11]
    (s,) = sched.schedule().scheduled
    assert s.num_draft_tokens == 1  # one output exists; the sampled token after the draft is the third


def test_accepted_tokens_are_appended_and_the_rest_rolled_back():
    sched, kv, request = _decoding()
    request.draft_token_ids = [8, 9, 10, 11, 12]
    out = sched.schedule()
    assert len(kv.block_ids("r")) == 3  # 12 token slots: 6 prompt + 1 + 5 drafted
    sched.update_from_output(out, {"r": 30}, {"r": [8, 9]})
    assert request.output_token_ids == [7, 8, 9, 30]
    assert out.scheduled[0].emitted == [8, 9, 30]
    assert request.num_computed_tokens == request.num_tokens - 1 == 9
    assert len(kv.block_ids("r")) == 3  # 9 verified tokens with KV need 3 blocks
    request.draft_token_ids = []
    out = sched.schedule()
    assert (out.scheduled[0].start, out.scheduled[0].token_ids) == (9, [30])


def test_rejected_blocks_go_back_and_are_never_hashed():
    sched, kv, request = _decoding(num_blocks=8)
    free_before = kv.pool.num_free_blocks
    request.draft_token_ids = [8, 9, 10, 11, 12, 13, 14, 15, 16]
    out = sched.schedule()
    assert out.scheduled[0].num_draft_tokens == 9  # 16 slots: 4 blocks
    assert kv.pool.num_free_blocks == free_before - 2
    sched.update_from_output(out, {"r": 40}, {"r": []})  # every draft token rejected
    assert request.all_token_ids == [1, 2, 3, 4, 5, 6, 7, 40]
    assert len(kv.block_ids("r")) == 2 and kv.pool.num_free_blocks == free_before
    # Only the verified full block [1, 2, 3, 4] is cached; [5, 6, 7, 8] held a draft token.
    assert kv.pool.num_cached_blocks == 1


def test_a_stop_token_inside_the_accepted_draft_ends_the_request_there():
    sched, kv, request = _decoding(stop_token_ids=frozenset({9}))
    request.draft_token_ids = [8, 9, 10]
    out = sched.schedule()
    finished = sched.update_from_output(out, {"r": 11}, {"r": [8, 9, 10]})
    assert finished == [request] and request.output_token_ids == [7, 8, 9]
    assert kv.block_ids("r") == []
