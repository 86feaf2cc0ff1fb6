"""A GGUF file's tokenizer: converted by transformers from the metadata once, then read back from the
cache (``engine.checkpoint.gguf_cache``) as the ``tokenizer.json`` and ``tokenizer_config.json``
(chat template and special tokens included) that ``save_pretrained`` writes.

The generic fast tokenizer class is named rather than left to ``AutoTokenizer``: to choose a class,
``AutoTokenizer`` first derives the model's whole config from the file (``load_gguf_checkpoint``: a
second parse of every metadata field, 6 s for SmolLM2), and every class it can choose for the
supported architectures wraps the same converted tokenizer.
"""

from __future__ import annotations

from pathlib import Path

from engine.checkpoint.gguf_cache import cached


def load_gguf_tokenizer(gguf_path: Path):
    from transformers import TokenizersBackend

    return cached(
        gguf_path,
        "tokenizer",
        derive=lambda: TokenizersBackend.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name),
        save=lambda tokenizer, directory: tokenizer.save_pretrained(str(directory)),
        load=lambda directory: TokenizersBackend.from_pretrained(str(directory)),
    )
