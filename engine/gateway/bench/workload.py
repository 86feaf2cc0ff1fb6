"""A seeded multi-tenant chat workload for routing benchmarks.

Four kinds of traffic, mixed: tenants' groups of requests sharing one long document, multi-turn
conversations (each turn resends the whole history), one-off unique prompts, and one very popular
prefix (a shared system prompt most tenants use) that a naive cache-aware router would pile onto a
single replica. The same seed gives the same sessions, prompts and order.
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


@dataclass
class Session:
    """One sequence of dependent requests (a conversation); single requests are one-turn sessions."""

    session_id: str
    kind: str  # popular | group | conversation | unique
    system: str
    turns: list[Turn] = field(default_factory=list)


@dataclass(frozen=True)
class WorkloadShape:
    requests: int = 160
    # Traffic per shared prefix is a few requests, as with many tenants: a router that sends each
    # prefix to one replica pays one cold prefill per prefix, round-robin pays up to one per replica.
    popular_share: float = 0.10  # of requests, all on one prefix: ~3x the traffic of a group's
    group_share: float = 0.30
    conversation_share: float = 0.45  # the rest are unique prompts
    groups: int = 12
    turns_per_conversation: int = 5
    # The tiny model's tokenizer makes about 5 tokens of a made-up word; its context is 1024 tokens.
    popular_words: int = 120
    document_words: int = 110
    conversation_system_words: int = 100
    unique_words: int = 100
    question_words: int = 10

    def __post_init__(self) -> None:
        if self.requests < 1:
            raise ValueError("requests must be >= 1")
        shares = (self.popular_share, self.group_share, self.conversation_share)
        if any(s < 0 for s in shares) or sum(shares) > 1:
            raise ValueError("traffic shares must be >= 0 and sum to at most 1")


class _Words:
    def __init__(self, rng: random.Random, size: int = 3000) -> None:
        self.rng = rng
        self.vocab = sorted(
            {"".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(1, 3))) for _ in range(size)}
        )

    def text(self, n: int) -> str:
        return " ".join(self.rng.choice(self.vocab) for _ in range(n))


def build_workload(shape: WorkloadShape, seed: int) -> list[Session]:
    """Sessions in submission order; every request of the run is one turn of one session."""
    rng = random.Random(seed)
    words = _Words(rng)
    popular = "You are the assistant of a large shop. Policies: " + words.text(shape.popular_words)
    documents = [f"Tenant {g} document: " + words.text(shape.document_words) for g in range(shape.groups)]
    n_popular = round(shape.requests * shape.popular_share)
    n_group = round(shape.requests * shape.group_share)
    n_conversation_turns = round(shape.requests * shape.conversation_share)
    n_unique = max(0, shape.requests - n_popular - n_group - n_conversation_turns)

    sessions: list[Session] = []
    for i in range(n_popular):
        sessions.append(Session(f"pop-{i}", "popular", popular, [Turn(words.text(shape.question_words))]))
    for i in range(n_group):
        g = rng.randrange(shape.groups)
        question = f"Question {i} about the document: " + words.text(shape.question_words)
        sessions.append(Session(f"group{g}-{i}", "group", documents[g], [Turn(question)]))
    c = 0
    while n_conversation_turns > 0:
        turns = min(shape.turns_per_conversation, n_conversation_turns)
        system = f"Conversation {c}. Persona: " + words.text(shape.conversation_system_words)
        sessions.append(
            Session(
                f"conv-{c}",
                "conversation",
                system,
                [Turn(words.text(shape.question_words)) for _ in range(turns)],
            )
        )
        n_conversation_turns -= turns
        c += 1
    for i in range(n_unique):
        sessions.append(
            Session(f"unique-{i}", "unique", f"Unique {i}: " + words.text(shape.unique_words), [Turn("Go.")])
        )
    rng.shuffle(sessions)
    return sessions


def total_requests(sessions: list[Session]) -> int:
    return sum(len(s.turns) for s in sessions)
