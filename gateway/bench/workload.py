"""A seeded multi-tenant chat workload for routing benchmarks.

Shaped like production multi-tenant traffic, where most input tokens are long shared prefixes:
tenants' groups of requests sharing one long document (~2,000 tokens), multi-turn conversations
that resend a ~1,200-token system prompt and the growing history every turn, one-off unique
prompts, and one very popular ~1,500-token system prompt that a naive cache-aware router would
pile onto a single replica.

Arrivals are open loop: sessions start at Poisson times fixed by the seed, whatever the policy, so a
faster policy does not get more load than a slower one; a conversation's next turn follows its
previous reply after a seeded think time, as a user's would. The same seed gives the same sessions,
prompts, start times and think times.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

_SYLLABLES = (
    "ka",
    "lo",
    "mi",
    "ren",
    "tu",
    "sa",
    "vel",
    "or",
    "pin",
    "da",
    "qu",
    "es",
    "th",
    "ul",
    "ny",
    "ba",
)


@dataclass
class Turn:
    user_text: str
    think_s: float = 0.0  # pause between the previous reply and this turn (0 for a first turn)
    # What the history holds as this turn's answer; None: the reply the model gave. A fixed one
    # makes every later prompt known in advance (gateway/bench/kv_trace_workload.py's accounting).
    reply: str | None = None


@dataclass
class Session:
    """One sequence of dependent requests (a conversation); single requests are one-turn sessions."""

    session_id: str
    kind: str  # popular | group | conversation | unique
    system: str
    turns: list[Turn] = field(default_factory=list)
    start_s: float = 0.0  # when the first turn is sent, from the start of the run
    cache_salt: str | None = None  # the tenant's: no prefix is shared across tenants


@dataclass(frozen=True)
class WorkloadShape:
    requests: int = 100
    popular_share: float = 0.10  # of requests, all on one prefix: ~4x the traffic of a group's
    group_share: float = 0.35
    conversation_share: float = 0.45  # the rest are unique prompts
    # A few requests per shared document, as with many tenants: a router that sends each prefix to
    # one replica pays one cold prefill per prefix, round-robin pays up to one per replica.
    requests_per_group: int = 3
    turns_per_conversation: int = 5
    # The tiny model's tokenizer makes about 4.7 tokens of a made-up word: ~1,500, ~2,000, ~1,200
    # and ~800-token prefixes. Needs a context of 4,096 (``make_tiny_model(max_positions=4096)``).
    popular_words: int = 320
    document_words: int = 420
    conversation_system_words: int = 260
    unique_words: int = 170
    question_words: int = 10
    rate: float = 2.5  # requests per second, on average, open loop
    think_s: float = 1.0  # mean pause before a conversation's next turn (exponential)

    def __post_init__(self) -> None:
        if self.requests < 1:
            raise ValueError("requests must be >= 1")
        shares = (self.popular_share, self.group_share, self.conversation_share)
        if any(s < 0 for s in shares) or sum(shares) > 1:
            raise ValueError("traffic shares must be >= 0 and sum to at most 1")
        if self.requests_per_group < 1 or self.turns_per_conversation < 1:
            raise ValueError("requests_per_group and turns_per_conversation must be >= 1")
        if self.rate <= 0 or self.think_s < 0:
            raise ValueError("rate must be > 0 and think_s >= 0")


class Words:
    def __init__(self, rng: random.Random, size: int = 3000) -> None:
        self.rng = rng
        self.vocab = sorted(
            {"".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(1, 3))) for _ in range(size)}
        )

    def text(self, n: int) -> str:
        return " ".join(self.rng.choice(self.vocab) for _ in range(n))


def build_workload(shape: WorkloadShape, seed: int) -> list[Session]:
    """Sessions in order of start time; every request of the run is one turn of one session."""
    rng = random.Random(seed)
    words = Words(rng)
    popular = "You are the assistant of a large shop. Policies: " + words.text(shape.popular_words)
    n_popular = round(shape.requests * shape.popular_share)
    n_group = round(shape.requests * shape.group_share)
    n_conversation_turns = round(shape.requests * shape.conversation_share)
    n_unique = max(0, shape.requests - n_popular - n_group - n_conversation_turns)
    groups = max(1, round(n_group / shape.requests_per_group))
    documents = [f"Tenant {g} document: " + words.text(shape.document_words) for g in range(groups)]

    sessions: list[Session] = []
    for i in range(n_popular):
        sessions.append(Session(f"pop-{i}", "popular", popular, [Turn(words.text(shape.question_words))]))
    for i in range(n_group):
        g = i % groups
        question = f"Question {i} about the document: " + words.text(shape.question_words)
        sessions.append(Session(f"group{g}-{i}", "group", documents[g], [Turn(question)]))
    c = 0
    while n_conversation_turns > 0:
        turns = min(shape.turns_per_conversation, n_conversation_turns)
        system = f"Conversation {c}. Persona: " + words.text(shape.conversation_system_words)
        user_turns = [
            Turn(
                words.text(shape.question_words),
                rng.expovariate(1 / shape.think_s) if t and shape.think_s else 0.0,
            )
            for t in range(turns)
        ]
        sessions.append(Session(f"conv-{c}", "conversation", system, user_turns))
        n_conversation_turns -= turns
        c += 1
    for i in range(n_unique):
        sessions.append(
            Session(f"unique-{i}", "unique", f"Unique {i}: " + words.text(shape.unique_words), [Turn("Go.")])
        )
    rng.shuffle(sessions)
    # Sessions arrive as a Poisson process whose rate makes requests (all turns) arrive at ``rate``.
    session_rate = shape.rate * len(sessions) / total_requests(sessions)
    clock = 0.0
    for session in sessions:
        session.start_s = clock
        clock += rng.expovariate(session_rate)
    return sessions


def total_requests(sessions: list[Session]) -> int:
    return sum(len(s.turns) for s in sessions)
