"""The KV-trace benchmark's trace and its offline count of cacheable prompt tokens."""

from collections import Counter

import pytest

from engine.server.protocol.prompts import request_prompt_ids
from engine.tokenizer import Tokenizer
from gateway.bench.kv_trace_workload import (
    TraceShape,
    build_trace,
    cacheable_tokens,
    session_messages,
    split_halves,
)
from gateway.bench.workload import Session, Turn

BS = 4


def common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def test_cacheable_tokens_are_the_leading_full_blocks_an_earlier_prompt_of_the_tenant_had(tiny_checkpoint):
    tokenizer = Tokenizer(str(tiny_checkpoint))
    doc = "A shared document about kalo and mipin and their many uses in the shop " * 3
    sessions = [
        Session("a1", "document", doc, [Turn("First question?")], cache_salt="A"),
        Session("a2", "document", doc, [Turn("Second question, longer?")], cache_salt="A"),
        Session("b1", "document", doc, [Turn("First question?")], cache_salt="B"),  # another tenant
        Session("a3", "document", doc, [Turn("First question?")], cache_salt="A"),  # a1 again
        Session("c", "chat", "Be brief.", [Turn("Hi", reply="Hello."), Turn("More")], cache_salt="A"),
    ]
    ids = {
        (s.session_id, t): request_prompt_ids(tokenizer, "chat", {"model": "m", "messages": m})
        for s in sessions
        for t, m in enumerate(session_messages(s))
    }
    accounting = cacheable_tokens(sessions, tokenizer, BS)
    assert accounting.prompt_tokens == {k: len(v) for k, v in ids.items()}
    cacheable = accounting.cacheable
    assert cacheable[("a1", 0)] == 0 and cacheable[("b1", 0)] == 0
    assert cacheable[("a2", 0)] == common_prefix(ids[("a1", 0)], ids[("a2", 0)]) // BS * BS > 0
    # The same prompt again: every full block but the one holding the last token.
    assert cacheable[("a3", 0)] == (len(ids[("a1", 0)]) - 1) // BS * BS
    # A chat's second turn resends the first turn's prompt.
    assert cacheable[("c", 1)] == common_prefix(ids[("c", 0)], ids[("c", 1)]) // BS * BS > 0
    chains = {tuple(v[: (len(v) // BS) * BS]) for v in ids.values()}
    assert accounting.distinct_blocks > max(len(c) for c in chains) // BS  # tenant B's chain counts too


def test_the_trace_is_seeded_has_every_kind_and_exactly_the_requests_asked_for():
    shape = TraceShape(requests=300, tenants=3)
    first, again = build_trace(shape, 5), build_trace(shape, 5)
    assert first == again and first != build_trace(shape, 6)
    turns = Counter()
    for session in first:
        turns[session.kind] += len(session.turns)
        assert all(t.reply for t in session.turns[:-1]) or session.kind == "document"
    assert sum(turns.values()) == 300 and set(turns) == {"document", "agent", "chat"}
    assert {s.cache_salt for s in first} == {"tenant-0", "tenant-1", "tenant-2"}
    one, two = split_halves(first)
    assert one + two == first and 150 <= sum(len(s.turns) for s in one) < 150 + 6


def test_an_agent_resends_its_growing_context():
    agent = next(s for s in build_trace(TraceShape(requests=200), 0) if s.kind == "agent")
    prompts = list(session_messages(agent))
    assert [len(m) for m in prompts] == [2 + 2 * k for k in range(len(agent.turns))]
    assert prompts[1][:2] == prompts[0] and prompts[1][2]["content"] == agent.turns[0].reply


@pytest.mark.parametrize(
    "bad", [{"requests": 1}, {"document_share": 0.8, "agent_share": 0.3}, {"chat_turns": (3, 2)}]
)
def test_bad_shapes_are_refused(bad):
    with pytest.raises(ValueError):
        TraceShape(**bad)
