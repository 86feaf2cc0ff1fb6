"""A seeded multi-tenant trace for the KV-tier benchmark, and what of it a prefix cache could serve.

Each tenant has its own cache salt (no prefix is shared across tenants), a system prompt shared by
its chats and agents, and a few documents that many one-turn questions are asked about (popular
ones more often). An agent loop resends a growing context: its task, then each step's tool output
after the previous step's fixed tool call. A chat resends its history every turn. Every assistant
message in a history is the trace's own fixed text, not the model's reply, so every prompt of the
trace is known in advance and its cacheable tokens can be counted offline (``cacheable_tokens``).
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass

from engine.kv.block_hash import hash_chain, salt_bytes
from gateway.bench.replay import assistant
from gateway.bench.workload import Session, Turn, Words

KINDS = ("document", "agent", "chat")


@dataclass(frozen=True)
class TraceShape:
    requests: int = 20_000
    tenants: int = 4
    documents_per_tenant: int = 6
    document_share: float = 0.4  # of sessions; agents take agent_share, chats the rest
    agent_share: float = 0.3
    # SmolLM2's tokenizer makes about 2.5 tokens of a made-up word: ~300-token documents, ~150-token
    # system prompts, ~35 tokens of tool output per agent step.
    document_words: int = 120
    system_words: int = 60
    question_words: int = 8
    tool_output_words: int = 14
    agent_steps: tuple[int, int] = (3, 6)
    chat_turns: tuple[int, int] = (2, 5)

    def __post_init__(self) -> None:
        if self.requests < 2 or self.tenants < 1 or self.documents_per_tenant < 1:
            raise ValueError("requests must be >= 2, tenants and documents_per_tenant >= 1")
        if not (
            0 <= self.document_share and 0 <= self.agent_share and self.document_share + self.agent_share <= 1
        ):
            raise ValueError("document_share and agent_share must be >= 0 and sum to at most 1")
        for low, high in (self.agent_steps, self.chat_turns):
            if not 1 <= low <= high:
                raise ValueError("agent_steps and chat_turns are (low, high) with 1 <= low <= high")


def build_trace(shape: TraceShape, seed: int) -> list[Session]:
    """Sessions in trace order, exactly ``shape.requests`` turns in all (the last one cut short)."""
    rng = random.Random(seed)
    words = Words(rng)
    systems = [
        f"Tenant {t} assistant. Rules: " + words.text(shape.system_words) for t in range(shape.tenants)
    ]
    documents = [
        [
            f"Tenant {t} document {d}: " + words.text(shape.document_words)
            for d in range(shape.documents_per_tenant)
        ]
        for t in range(shape.tenants)
    ]
    popularity = [1 / (d + 1) for d in range(shape.documents_per_tenant)]  # Zipf-like
    sessions: list[Session] = []
    left = shape.requests
    while left > 0:
        t = rng.randrange(shape.tenants)
        draw = rng.random()
        n = len(sessions)
        if draw < shape.document_share:
            d = rng.choices(range(shape.documents_per_tenant), popularity)[0]
            question = f"Question {n}: " + words.text(shape.question_words)
            session = Session(f"doc-{n}", "document", documents[t][d], [Turn(question)])
        elif draw < shape.document_share + shape.agent_share:
            steps = rng.randint(*shape.agent_steps)
            turns = [Turn(f"Task {n}: " + words.text(shape.question_words), reply=f"CALL tool_{n}_0")]
            for k in range(1, steps):
                output = f"Tool output {k}: " + words.text(shape.tool_output_words)
                turns.append(Turn(output, reply=f"CALL tool_{n}_{k}"))
            session = Session(f"agent-{n}", "agent", systems[t], turns)
        else:
            turns = [
                Turn(words.text(shape.question_words), reply=f"Noted {n}.{k}.")
                for k in range(rng.randint(*shape.chat_turns))
            ]
            session = Session(f"chat-{n}", "chat", systems[t], turns)
        session.turns = session.turns[:left]
        session.cache_salt = f"tenant-{t}"
        left -= len(session.turns)
        sessions.append(session)
    return sessions


def split_halves(sessions: list[Session]) -> tuple[list[Session], list[Session]]:
    """The sessions up to half the trace's requests, and the rest (no session is split)."""
    total = sum(len(s.turns) for s in sessions)
    done = 0
    for i, session in enumerate(sessions):
        if done >= total / 2:
            return sessions[:i], sessions[i:]
        done += len(session.turns)
    return sessions, []


def session_messages(session: Session) -> Iterator[list[dict]]:
    """Each turn's messages, as ``replay`` sends them when every turn has a fixed reply."""
    history = [{"role": "system", "content": session.system}]
    for turn in session.turns:
        messages = history + [{"role": "user", "content": turn.user_text}]
        yield messages
        history = messages + [assistant(turn.reply or "")]


@dataclass
class TraceAccounting:
    cacheable: dict[tuple[str, int], int]  # (session id, turn) -> cacheable prompt tokens
    prompt_tokens: dict[tuple[str, int], int]
    distinct_blocks: int  # full-block chains across the whole trace, every tenant's

    def distinct_tokens(self, block_size: int) -> int:
        return self.distinct_blocks * block_size


def cacheable_tokens(sessions: list[Session], tokenizer, block_size: int) -> TraceAccounting:
    """Per request, the leading full blocks of its rendered prompt (the replica's own template and
    tokenizer) whose chain an earlier request of the same tenant already had, in trace order, at
    most ``(prompt_len - 1) // block_size`` blocks (the engine always computes the last token)."""
    from engine.server.protocol.prompts import request_prompt_ids

    seen: set[bytes] = set()
    cacheable: dict[tuple[str, int], int] = {}
    prompts: dict[tuple[str, int], int] = {}
    for session in sessions:
        salt = salt_bytes(session.cache_salt)
        for turn, messages in enumerate(session_messages(session)):
            ids = request_prompt_ids(tokenizer, "chat", {"model": "trace", "messages": messages})
            hashes = hash_chain(ids, block_size, salt)
            limit = min(len(hashes), (len(ids) - 1) // block_size)
            n = 0
            while n < limit and hashes[n] in seen:
                n += 1
            seen.update(hashes)
            cacheable[(session.session_id, turn)] = n * block_size
            prompts[(session.session_id, turn)] = len(ids)
    return TraceAccounting(cacheable, prompts, len(seen))
