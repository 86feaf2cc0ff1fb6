"""The checkpoint's tokenizer and chat template, with injection-safe encoding of chat prompts.

A rendered chat prompt mixes control tokens the template wrote (``<|im_start|>``) with user text.
Encoding the rendered string naively would turn a user who *types* ``<|im_end|>`` into a control
token. So before rendering, every special-token literal anywhere in what the caller passes (message
and tool strings, dict keys such as a JSON-schema property name, template kwargs, at any depth) is
swapped for a random alphanumeric marker (which survives templates and JSON escaping unchanged);
after rendering, the text between markers is encoded normally (only the template's own literals are
left in it to become control tokens) and each marker is encoded as plain text.
"""

from __future__ import annotations

import re
import secrets
import threading
from pathlib import Path
from typing import Any

from engine.checkpoint.errors import CheckpointError
from engine.checkpoint.gguf_file import find_gguf
from engine.tokenizer.gguf_tokenizer import load_gguf_tokenizer


class Tokenizer:
    def __init__(self, model_dir: str | Path, eos_token_ids: list[int] | None = None) -> None:
        from transformers import AutoTokenizer

        model_dir = Path(model_dir)
        gguf_path = find_gguf(model_dir)
        source = gguf_path or model_dir / "tokenizer.json"
        if (
            gguf_path is None
            and not (model_dir / "tokenizer.json").is_file()
            and not (model_dir / "tokenizer_config.json").is_file()
        ):
            raise CheckpointError(source, "file is missing (no tokenizer in the checkpoint)")
        try:
            if gguf_path is None:
                self.hf = AutoTokenizer.from_pretrained(str(model_dir))
            else:  # transformers builds a fast tokenizer (and the chat template) from the metadata
                self.hf = load_gguf_tokenizer(gguf_path)
        except Exception as exc:  # transformers raises many types for a broken tokenizer
            raise CheckpointError(source, f"cannot load tokenizer ({exc})") from exc
        ids = list(eos_token_ids or [])
        if self.hf.eos_token_id is not None and self.hf.eos_token_id not in ids:
            ids.append(self.hf.eos_token_id)
        self.eos_token_ids: list[int] = ids
        specials = set(self.hf.all_special_tokens)
        specials.update(t.content for t in self.hf.added_tokens_decoder.values() if t.special)
        self.special_tokens: list[str] = sorted((s for s in specials if s), key=len, reverse=True)
        self.special_token_ids: set[int] = {self.hf.convert_tokens_to_ids(s) for s in self.special_tokens}
        self._special_re = (
            re.compile("|".join(map(re.escape, self.special_tokens))) if self.special_tokens else None
        )
        self._lock = threading.Lock()  # the HF backend flips a flag per encode call

    @property
    def backend(self):
        """The underlying ``tokenizers.Tokenizer`` (used by the incremental detokenizer)."""
        return self.hf.backend_tokenizer

    @property
    def vocab_size(self) -> int:
        return len(self.hf)

    @property
    def has_chat_template(self) -> bool:
        return bool(self.hf.chat_template)

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        """Plain encoding: special-token literals in ``text`` become control tokens (raw prompts)."""
        with self._lock:
            return list(
                self.hf.encode(text, add_special_tokens=add_special_tokens, split_special_tokens=False)
            )

    def encode_plain(self, text: str) -> list[int]:
        """Encode untrusted text: special-token literals stay ordinary text."""
        with self._lock:
            return list(self.hf.encode(text, add_special_tokens=False, split_special_tokens=True))

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        return self.hf.decode(ids, skip_special_tokens=skip_special_tokens)

    def apply_chat_template(
        self,
        messages: list[dict],
        tools: list[dict] | None = None,
        add_generation_prompt: bool = True,
        **kwargs: Any,
    ) -> str:
        rendered, literals = self._render(messages, tools, add_generation_prompt, kwargs)
        return (
            self._marker_re(literals).sub(lambda m: literals[m.group(0)], rendered) if literals else rendered
        )

    def encode_chat(
        self,
        messages: list[dict],
        tools: list[dict] | None = None,
        add_generation_prompt: bool = True,
        **kwargs: Any,
    ) -> list[int]:
        rendered, literals = self._render(messages, tools, add_generation_prompt, kwargs)
        if not literals:
            return self.encode(rendered, add_special_tokens=False)
        ids: list[int] = []
        pos = 0
        for m in self._marker_re(literals).finditer(rendered):
            if m.start() > pos:
                ids += self.encode(rendered[pos : m.start()], add_special_tokens=False)
            ids += self.encode_plain(literals[m.group(0)])
            pos = m.end()
        if pos < len(rendered):
            ids += self.encode(rendered[pos:], add_special_tokens=False)
        return ids

    def _render(
        self, messages: list[dict], tools: list[dict] | None, add_generation_prompt: bool, kwargs: dict
    ) -> tuple[str, dict[str, str]]:
        if not self.has_chat_template:
            raise ValueError("this checkpoint's tokenizer has no chat template")
        if not isinstance(messages, list) or not all(isinstance(m, dict) and "role" in m for m in messages):
            raise ValueError("messages must be a list of objects with a 'role'")
        literals: dict[str, str] = {}
        nonce = secrets.token_hex(8)
        masked_messages = _mask(messages, self._special_re, nonce, literals)
        masked_tools = _mask(tools, self._special_re, nonce, literals) if tools else None
        masked_kwargs = _mask(kwargs, self._special_re, nonce, literals)
        try:
            rendered = self.hf.apply_chat_template(
                masked_messages,
                tools=masked_tools,
                add_generation_prompt=add_generation_prompt,
                tokenize=False,
                **masked_kwargs,
            )
        except Exception as exc:  # jinja raises TemplateError and friends for unusable conversations
            raise ValueError(f"chat template failed: {exc}") from exc
        return rendered, literals

    @staticmethod
    def _marker_re(literals: dict[str, str]) -> re.Pattern:
        return re.compile("|".join(map(re.escape, sorted(literals, key=len, reverse=True))))


def _mask(value: Any, special_re: re.Pattern | None, nonce: str, literals: dict[str, str]) -> Any:
    """Copy of ``value`` with every special-token literal in every string, keys included, swapped for a
    marker."""
    if special_re is None:
        return value
    if isinstance(value, str):

        def swap(m: re.Match) -> str:
            key = f"CHASSISx{nonce}x{len(literals)}x"
            literals[key] = m.group(0)
            return key

        return special_re.sub(swap, value)
    if isinstance(value, dict):
        return {
            _mask(k, special_re, nonce, literals): _mask(v, special_re, nonce, literals)
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [_mask(v, special_re, nonce, literals) for v in value]
    return value
