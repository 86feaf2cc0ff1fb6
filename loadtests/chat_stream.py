"""Locust: independent single-turn streaming chats (TTFT and inter-token latency per request).

locust -f loadtests/chat_stream.py --host http://127.0.0.1:8080 --headless -u 16 -r 4 -t 2m
"""

from __future__ import annotations

import random

from locust import between, task
from streaming import StreamingChatUser

QUESTIONS = (
    "Explain what a KV cache is in two sentences.",
    "Write a haiku about load balancers.",
    "List three uses of a Bloom filter.",
    "What is the difference between latency and throughput?",
    "Summarise the plot of a heist film you invent.",
    "Give one tip for writing readable Python.",
)


class ChatStreamUser(StreamingChatUser):
    wait_time = between(0.1, 0.5)

    @task
    def ask(self) -> None:
        question = f"{random.choice(QUESTIONS)} (#{random.randrange(1_000_000)})"
        self.stream_chat([{"role": "user", "content": question}], name="chat")
