"""Seeded conversations for each benchmark workload: the same seed gives the same prompts.

- ``chat-short``: independent one-turn requests with short prompts.
- ``shared-prefix``: one-turn requests from a few tenants, each tenant's requests opening with the
  same long system prompt (what the prefix cache is for).
- ``multi-turn``: conversations of a few turns; each turn resends the history, so every turn after
  the first shares a prefix with the one before.

Pure Python, no Django: the load generator and its tests use it directly.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

WORKLOADS = ("chat-short", "shared-prefix", "multi-turn")
TENANTS = 4
SYSTEM_PROMPT_WORDS = 120
TURNS_PER_CONVERSATION = 3
_WORDS = (
    "order", "refund", "policy", "shipping", "invoice", "account", "delivery", "payment", "warranty",
    "support", "product", "contract", "service", "discount", "return", "customer", "status", "update",
    "address", "billing", "login", "reset", "upgrade", "plan", "limit", "quota", "region", "latency",
)  # fmt: skip


@dataclass
class Conversation:
    """User turns sent one after another; each turn's request carries the replies before it."""

    index: int
    system: str | None
    user_turns: list[str] = field(default_factory=list)


def _words(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(n))


def system_prompt(tenant: int, words: int = SYSTEM_PROMPT_WORDS) -> str:
    rng = random.Random(f"tenant-{tenant}")
    return f"You are the assistant of tenant {tenant}. Follow this handbook.\n{_words(rng, words)}"


def build_conversations(workload: str, requests: int, seed: int) -> list[Conversation]:
    """Conversations holding exactly ``requests`` user turns in all."""
    if workload not in WORKLOADS:
        raise ValueError(f"unknown workload {workload!r}; choose one of {', '.join(WORKLOADS)}")
    if requests < 1:
        raise ValueError(f"requests must be at least 1, got {requests}")
    rng = random.Random(seed)
    if workload == "chat-short":
        return [
            Conversation(i, None, [f"Question {i}: {_words(rng, rng.randint(4, 12))}?"])
            for i in range(requests)
        ]
    if workload == "shared-prefix":
        prompts = [system_prompt(tenant) for tenant in range(TENANTS)]
        return [
            Conversation(i, prompts[rng.randrange(TENANTS)], [f"Customer asks: {_words(rng, 6)}?"])
            for i in range(requests)
        ]
    conversations = []
    remaining = requests
    for i in range(math.ceil(requests / TURNS_PER_CONVERSATION)):
        turns = min(TURNS_PER_CONVERSATION, remaining)
        remaining -= turns
        system = f"You are a helpful assistant. Session {i}: {_words(rng, 20)}."
        conversations.append(Conversation(i, system, [f"Turn {t}: {_words(rng, 8)}?" for t in range(turns)]))
    return conversations


def fixed_length_conversations(
    requests: int, input_tokens: int, seed: int, salt: str = ""
) -> list[Conversation]:
    """One-turn requests of about ``input_tokens`` prompt tokens each (one common word is one token
    for the usual tokenizers), all different from their first word on: a sweep point measures
    uncached prefill; ``salt`` (a sweep point's other coordinates) keeps points from sharing prompts.
    The reply's usage says the exact count."""
    if requests < 1 or input_tokens < 1:
        raise ValueError(f"requests and input_tokens must be at least 1, got {requests}, {input_tokens}")
    rng = random.Random(f"{seed}-{input_tokens}-{salt}")
    return [
        Conversation(i, None, [f"{i} {rng.randrange(10**6)} {_words(rng, max(1, input_tokens - 2))}"])
        for i in range(requests)
    ]


def request_count(conversations: list[Conversation]) -> int:
    return sum(len(c.user_turns) for c in conversations)
