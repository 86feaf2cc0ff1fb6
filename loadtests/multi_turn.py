"""Locust: multi-turn conversations. Each turn resends the whole history plus a new question, so
every request's prompt extends the previous one (prefix-cache hits grow turn by turn).

    CHASSIS_TURNS=6 locust -f loadtests/multi_turn.py --host http://127.0.0.1:8080 --headless -u 8 -r 2 -t 5m
"""

from __future__ import annotations

import os
import random

from locust import between, task
from streaming import StreamingChatUser

TURNS = int(os.environ.get("CHASSIS_TURNS", "4"))
FOLLOW_UPS = ("Tell me more.", "Why?", "Give an example.", "Can you shorten that?", "And then?")


class MultiTurnUser(StreamingChatUser):
    wait_time = between(0.2, 1.0)

    def on_start(self) -> None:
        super().on_start()
        self._new_conversation()

    def _new_conversation(self) -> None:
        topic = random.choice(("tea", "rivers", "compilers", "chess", "bridges"))
        self.history = [
            {"role": "user", "content": f"Let's talk about {topic}. What is interesting about it?"}
        ]
        self.turn = 0

    @task
    def next_turn(self) -> None:
        reply = self.stream_chat(self.history, name=f"multi-turn {min(self.turn + 1, TURNS)}")
        self.turn += 1
        if reply is None or self.turn >= TURNS:
            self._new_conversation()
            return
        self.history += [
            {"role": "assistant", "content": reply},
            {"role": "user", "content": random.choice(FOLLOW_UPS)},
        ]
