"""The scheduler on plain Python objects: no model, no torch."""

import sys

from engine.kv.kv_manager import KVCacheManager
from engine.scheduler.request import Request, RequestStatus
from engine.scheduler.scheduler import Scheduler


def _sched(num_blocks=64, block_size=4, budget=32, max_seqs=8, caching=True, admission_batch=1):
    kv = KVCacheManager(num_blocks, block_size, caching)
    return Scheduler(kv, budget, max_seqs, admission_batch=admission_batch)


def _req(rid, n_prompt, max_tokens=4, first=0, **kw):
    return Request(rid, list(range(first, first + n_prompt)), max_tokens=max_tokens, **kw)


def _step(sched, token=7):
    out = sched.schedule()
    sampled = {s.request.request_id: token for s in out.scheduled if s.samples}
    finished = sched.update_from_output(out, sampled)
    return out, finished


def test_scheduler_does_not_import_torch():
    assert "engine.scheduler.scheduler" in sys.modules
    src = open(sys.modules["engine.scheduler.scheduler"].__file__).read()
    src += open(sys.modules["engine.kv.kv_manager"].__file__).read()
    assert "import torch" not in src


def test_chunked_prefill_mixes_with_decodes_under_the_budget():
    sched = _sched(budget=10)
    sched.add_request(_req("a", 3))
    out, _ = _step(sched)
    assert [(s.request.request_id, s.num_tokens, s.samples) for s in out.scheduled] == [("a", 3, True)]
    sched.add_request(_req("b", 25, first=100))
    out, _ = _step(sched)
    # a decodes one token, b gets the remaining 9 of the budget as a first chunk
    assert [(s.request.request_id, s.num_tokens, s.samples) for s in out.scheduled] == [
        ("a", 1, True),
        ("b", 9, False),
    ]
    out, _ = _step(sched)
    assert [(s.request.request_id, s.start, s.num_tokens) for s in out.scheduled] == [
        ("a", 4, 1),
        ("b", 9, 9),
    ]
    out, _ = _step(sched)
    assert out.scheduled[1].samples and out.scheduled[1].num_tokens == 7
    assert sched.requests["b"].output_token_ids == [7]
    assert out.total_num_tokens <= 10


def test_max_num_seqs_limits_running_requests():
    sched = _sched(max_seqs=2)
    for i in range(3):
        sched.add_request(_req(f"r{i}", 2, first=10 * i))
    out, _ = _step(sched)
    assert len(out.scheduled) == 2 and len(sched.waiting) == 1


def test_finishes_on_length_eos_and_stop_token():
    sched = _sched()
    sched.add_request(_req("len", 2, max_tokens=2))
    sched.add_request(_req("eos", 2, first=20, eos_token_ids=frozenset({7})))
    sched.add_request(_req("stop", 2, first=40, stop_token_ids=frozenset({7})))
    sched.add_request(_req("min", 2, first=60, eos_token_ids=frozenset({7}), min_tokens=2))
    _, finished = _step(sched)
    assert {r.request_id for r in finished} == {"eos", "stop"}
    assert sched.kv.block_ids("eos") == []  # blocks freed at once
    stop = next(r for r in finished if r.request_id == "stop")
    assert stop.status == RequestStatus.FINISHED_STOPPED and stop.stop_reason == 7
    _, finished = _step(sched)
    assert {(r.request_id, r.status.finish_reason) for r in finished} == {("len", "length"), ("min", "stop")}


def test_preemption_by_recompute_when_blocks_run_out():
    sched = _sched(num_blocks=4, block_size=4, budget=64)
    # 7 + 9 = 16 tokens: each request alone fits the 4-block pool, both together do not
    sched.add_request(_req("a", 7, max_tokens=9))
    sched.add_request(_req("b", 7, max_tokens=9, first=50))
    _step(sched)  # both hold 2 blocks; pool is full
    assert sched.kv.pool.num_free_blocks == 0
    _step(sched)  # position 7 still fits in the second block
    assert sched.num_preemptions == 0
    _step(sched)  # a needs a third block for position 8: b (the last admitted) is preempted
    assert sched.num_preemptions == 1
    b = sched.requests["b"]
    assert b.status == RequestStatus.PREEMPTED and b.num_computed_tokens == 0
    assert sched.waiting[0] is b and sched.kv.block_ids("b") == []
    assert len(b.output_token_ids) == 2  # generated tokens are kept and recomputed later
    for _ in range(20):
        if "a" not in sched.requests:
            break
        _step(sched)
    assert "a" not in sched.requests
    out, _ = _step(sched)
    resumed = out.scheduled[0]
    assert resumed.request is b and resumed.start == 0 and resumed.num_tokens == 9


def test_abort_frees_blocks_immediately():
    sched = _sched()
    sched.add_request(_req("a", 9))
    _step(sched)
    assert sched.kv.pool.num_used_blocks == 3
    sched.finish_request("a", RequestStatus.FINISHED_ABORTED)
    assert sched.kv.pool.num_used_blocks == 0 and sched.num_unfinished == 0
    assert sched.finish_request("a", RequestStatus.FINISHED_ABORTED) is None
    sched.add_request(_req("w", 3))
    sched.finish_request("w", RequestStatus.FINISHED_ABORTED)  # aborting a waiting request
    assert not sched.waiting


def test_prefix_hit_is_recorded_on_the_request():
    sched = _sched()
    sched.add_request(_req("a", 9, max_tokens=1))
    _step(sched)
    sched.add_request(_req("b", 10, max_tokens=1))
    out, _ = _step(sched)
    assert sched.kv.prefix_cache_hits == 8
    assert out.scheduled[0].start == 8 and out.scheduled[0].num_tokens == 2


def _admitted(out):
    return sorted(s.request.request_id for s in out.scheduled if s.start == 0)


def _full_engine(admission_batch, spacing=1):
    """Four seats, taken by requests that finish every ``spacing`` steps from the second step on,
    and ten more requests waiting."""
    sched = _sched(num_blocks=256, budget=64, max_seqs=4, admission_batch=admission_batch)
    for i in range(4):
        sched.add_request(_req(f"run{i}", 2, max_tokens=3 + spacing * i, first=10 * i))
    _step(sched)
    for i in range(10):
        sched.add_request(_req(f"wait{i}", 2, max_tokens=50, first=100 + 10 * i))
    return sched


def test_admission_batch_one_admits_a_prompt_whenever_a_seat_frees():
    sched = _full_engine(admission_batch=1)
    admissions = [_admitted(_step(sched)[0]) for _ in range(6)]
    assert admissions == [[], [], ["wait0"], ["wait1"], ["wait2"], ["wait3"]]


def test_a_full_engine_gathers_seats_and_admits_their_prompts_together():
    sched = _full_engine(admission_batch=3)
    admissions = [_admitted(_step(sched)[0]) for _ in range(6)]
    # run0..run2 finish after steps 2, 3 and 4; the three freed seats are filled in one step.
    assert admissions == [[], [], [], [], ["wait0", "wait1", "wait2"], []]


def test_deferred_admission_waits_at_most_admission_batch_steps():
    sched = _full_engine(admission_batch=4, spacing=3)
    admissions = [_admitted(_step(sched)[0]) for _ in range(8)]
    # run0 ends in step 2 and run1 in step 5; from step 3 a seat is free, held four steps at most:
    # the two seats free by then are filled in step 7.
    assert admissions == [[], [], [], [], [], [], ["wait0", "wait1"], []]


def test_admission_is_not_deferred_with_seats_for_everyone_waiting():
    sched = _sched(max_seqs=8, admission_batch=4)
    sched.add_request(_req("a", 2, max_tokens=20))
    _step(sched)
    sched.add_request(_req("b", 2, max_tokens=20, first=50))
    out, _ = _step(sched)
    assert _admitted(out) == ["b"]  # low load: a lone arrival is never held back


def test_a_step_that_carries_a_prompt_chunk_admits_at_once():
    sched = _sched(budget=6, max_seqs=3, admission_batch=3)
    sched.add_request(_req("long", 10, max_tokens=20))
    sched.add_request(_req("short", 2, max_tokens=20, first=50))
    for i in range(3):
        sched.add_request(_req(f"w{i}", 2, max_tokens=20, first=100 + 10 * i))
    out, _ = _step(sched)
    assert _admitted(out) == ["long"]  # the budget goes to long's first chunk
    out, _ = _step(sched)
    # long's second chunk makes this an eager step: short is admitted beside it though only one
    # seat is free and two requests wait behind it.
    assert _admitted(out) == ["short"]
