"""Locust: tenants whose requests share a long system prompt (what the prefix cache and cache-aware
routing are for). Each user belongs to one tenant; tenants' prompts differ from the first word.

    CHASSIS_TENANTS=8 CHASSIS_PREFIX_WORDS=1500 \
    locust -f loadtests/shared_prefix.py --host http://127.0.0.1:8080 --headless -u 32 -r 8 -t 5m

Watch ``vllm:prefix_cache_hits_total / vllm:prefix_cache_queries_total`` (the engine dashboard's
prefix-cache hit rate) and the TTFT entries: cached prefixes skip prefill.
"""

from __future__ import annotations

import itertools
import os
import random

from locust import between, task
from streaming import StreamingChatUser

TENANTS = int(os.environ.get("CHASSIS_TENANTS", "4"))
PREFIX_WORDS = int(os.environ.get("CHASSIS_PREFIX_WORDS", "400"))
_VOCABULARY = ("policy", "refund", "customer", "order", "shipping", "warranty", "invoice", "account",
               "support", "product", "delivery", "return", "payment", "discount", "service", "contract")  # fmt: skip
_next_user = itertools.count()


def system_prompt(tenant: int, words: int = PREFIX_WORDS) -> str:
    """The same text for a tenant in every process and run (seeded), different between tenants."""
    rng = random.Random(tenant)
    body = " ".join(rng.choice(_VOCABULARY) for _ in range(words))
    return f"You are the assistant of tenant {tenant}. Follow the handbook below.\n{body}"


class SharedPrefixUser(StreamingChatUser):
    wait_time = between(0.1, 0.5)

    def on_start(self) -> None:
        super().on_start()
        self.tenant = next(_next_user) % TENANTS
        self.system = system_prompt(self.tenant)

    @task
    def ask(self) -> None:
        question = f"Customer question {random.randrange(1_000_000)}: where is my order?"
        messages = [{"role": "system", "content": self.system}, {"role": "user", "content": question}]
        self.stream_chat(messages, name="shared-prefix")
