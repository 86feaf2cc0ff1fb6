"""Scripted thinking checkpoints (``engine.testing.scripted_model``'s bigram trick): greedy decoding
answers every chat prompt with a reasoning block and then an answer, in either template style.

- Qwen3 style (the tiny chatml template, with its ``enable_thinking`` switch): the reply opens the
  block itself, ``<think>`` … ``</think>`` then the answer. With ``enable_thinking`` false the
  template closes an empty block in the prompt, whose last token the script does not continue:
  the reply is empty.
- DeepSeek-R1 style (its own template, no switch): the generation prompt ends inside an open
  ``<think>``, so the reply starts as reasoning and closes it with ``</think>``.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from engine.testing.scripted_model import make_scripted_model

REASONING = "The user says hi. I greet back."
ANSWER = "Hello there!"
QWEN3_PIECES = ("<think>", "\nThe user says hi.", " I greet back.\n", "</think>", "\n\nHello", " there!")
R1_PIECES = ("The user says hi.", " I greet back.\n", "</think>", "\n\nHello", " there!")


def make_qwen3_thinking_model(out_dir: str | Path) -> Path:
    return make_scripted_model(out_dir, QWEN3_PIECES)


def make_r1_thinking_model(out_dir: str | Path) -> Path:
    template = resources.files("engine.testing.tiny_templates").joinpath("r1_think.jinja").read_text()
    return make_scripted_model(out_dir, R1_PIECES, chat_template=template)
