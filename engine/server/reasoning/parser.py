"""Incremental reasoning parsing: generated text in, reasoning and answer text out.

DeepSeek-R1 style templates end the generation prompt inside an open ``<think>``, so the reply
starts as reasoning; Qwen3 (and DeepSeek-V3.1 thinking) replies open the block themselves. Either
way the reasoning runs to ``</think>`` and the answer follows. Text that might be the start of a
marker is held back until the next chunk decides it, so feeding the whole text at once gives the
same split as feeding it one character at a time.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.server.tool_parsers.base import partial_marker_suffix

START = "<think>"
END = "</think>"


@dataclass
class ReasoningDelta:
    reasoning: str = ""
    content: str = ""


class ReasoningParser:
    def __init__(self, starts_in_reasoning: bool) -> None:
        # "head": undecided whether the reply opens a block; "reasoning"; "answer".
        self.state = "reasoning" if starts_in_reasoning else "head"
        self._may_reopen = starts_in_reasoning  # a reply may repeat the prompt's <think>
        self._buffer = ""
        self._at_answer_start = False  # the newlines after </think> are not part of the answer

    @property
    def in_reasoning(self) -> bool:
        return self.state != "answer"

    def feed(self, text: str) -> ReasoningDelta:
        self._buffer += text
        out = ReasoningDelta()
        if self.state == "head":
            head = self._buffer.lstrip()
            if not head or (START.startswith(head) and head != START):
                return out  # cannot tell yet
            if head.startswith(START):
                self.state = "reasoning"
                self._buffer = head[len(START) :]
            else:
                self.state = "answer"
        if self.state == "reasoning":
            if self._may_reopen:
                head = self._buffer.lstrip()
                if not head or (START.startswith(head) and head != START):
                    return out  # cannot tell yet
                self._may_reopen = False
                if head.startswith(START):
                    self._buffer = head[len(START) :]
            pos = self._buffer.find(END)
            if pos < 0:
                keep = partial_marker_suffix(self._buffer, END)
                out.reasoning = self._buffer[: len(self._buffer) - keep]
                self._buffer = self._buffer[len(self._buffer) - keep :]
                return out
            out.reasoning = self._buffer[:pos]
            self._buffer = self._buffer[pos + len(END) :]
            self.state = "answer"
            self._at_answer_start = True
        if self._at_answer_start:
            self._buffer = self._buffer.lstrip("\n")
            if not self._buffer:
                return out
            self._at_answer_start = False
        out.content, self._buffer = self._buffer, ""
        return out

    def finish(self) -> ReasoningDelta:
        out = self.feed("")
        rest, self._buffer = self._buffer, ""
        if self.state == "reasoning":
            out.reasoning += rest  # cut off (length) inside the reasoning
        else:
            out.content += rest
        return out
