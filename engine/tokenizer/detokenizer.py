"""Incremental detokenization with stop strings, one instance per request.

Text is produced by ``tokenizers``' DecodeStream, which buffers tokens until they form whole UTF-8
characters, so a character split over several byte tokens is never emitted as U+FFFD halves. Text
that could still turn into a stop string is held back until it is either a stop (and is cut) or
cannot be one any more (and is released).
"""

from __future__ import annotations

from tokenizers.decoders import DecodeStream


class IncrementalDetokenizer:
    def __init__(
        self,
        backend,  # tokenizers.Tokenizer
        skip_special_tokens: bool = True,
        stop: list[str] | None = None,
        include_stop_str_in_output: bool = False,
    ) -> None:
        self._backend = backend
        self._skip_special = skip_special_tokens
        self._stream = DecodeStream(skip_special_tokens=skip_special_tokens)
        self._stop = list(stop or [])
        self._include_stop = include_stop_str_in_output
        self._token_ids: list[int] = []
        self._decoded = ""  # everything the stream produced
        self._emitted = 0  # chars of _decoded already handed out
        self.text = ""  # the cumulative output text
        self.stop_string: str | None = None

    def push(self, token_ids: list[int]) -> str:
        """Feed new tokens; returns the new text that may be released now. After a stop string
        matches, ``stop_string`` is set and nothing more is released."""
        if self.stop_string is not None:
            return ""
        for token_id in token_ids:
            self._token_ids.append(token_id)
            try:
                chunk = self._stream.step(self._backend, token_id)
            except Exception:  # an id outside the tokenizer's vocabulary (padded model vocab)
                chunk = None
            if chunk:
                self._decoded += chunk
        return self._release()

    @property
    def has_stop_strings(self) -> bool:
        return bool(self._stop)

    def decode_all(self, token_ids: list[int]) -> str:
        """For a request nobody streams: decode every token at once at the end (same text as
        ``push`` then ``flush``, without a DecodeStream step per token). Only without stop strings."""
        if self._stop:
            raise ValueError("stop strings need the text token by token: use push()")
        self._token_ids = list(token_ids)
        return self.flush()

    def flush(self) -> str:
        """At the end of a request: release held-back text, including bytes that never completed."""
        if self.stop_string is not None:
            return ""
        full = self._backend.decode(self._token_ids, skip_special_tokens=self._skip_special)
        if full.startswith(self._decoded):
            self._decoded = full
        return self._take(len(self._decoded))

    def _release(self) -> str:
        if not self._stop:
            return self._take(len(self._decoded))
        start = self._emitted
        best: tuple[int, str] | None = None
        for stop in self._stop:
            i = self._decoded.find(stop, start)
            if i >= 0 and (best is None or i < best[0]):
                best = (i, stop)
        if best is not None:
            i, stop = best
            end = i + len(stop) if self._include_stop else i
            delta = self._take(end)
            self.stop_string = stop
            return delta
        return self._take(len(self._decoded) - self._held_back())

    def _held_back(self) -> int:
        """Length of the longest tail of the text that is a proper prefix of some stop string."""
        tail = self._decoded[self._emitted :]
        longest = 0
        for stop in self._stop:
            for k in range(min(len(stop) - 1, len(tail)), longest, -1):
                if tail.endswith(stop[:k]):
                    longest = k
                    break
        return longest

    def _take(self, end: int) -> str:
        delta = self._decoded[self._emitted : end]
        self._emitted = max(self._emitted, end)
        self.text += delta
        return delta
