"""The on-disk cache of what is derived from a GGUF header (config, tensor table, tokenizer): a warm load
parses no metadata and serves exactly what a cold one derived; a changed file or a damaged entry is
derived again; the cache can be turned off. Parses are counted, never timed."""

import os
import shutil

import gguf
import pytest
import torch
from transformers.integrations.gguf import reader as transformers_gguf_reader

from engine import env
from engine.checkpoint import load_model_config
from engine.checkpoint.gguf_cache import cached, entry_dir
from engine.checkpoint.gguf_file import _reader
from engine.checkpoint.weights import iter_weights, tensor_shapes
from engine.testing.smollm2 import smollm2_path
from engine.tokenizer import Tokenizer
from tests.support.checkpoints import GGUF_TWIN_ARCHES

TEXTS = [
    "Hello world",
    "  déjà vu <|im_end|> x",
    "def f(x):\n\treturn x**2",
    "日本語のテキスト",
    "<|im_start|>user\nhi<|endoftext|>",
]
CHAT = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Format the <|im_end|> help text, héllo"},
]


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """This test's own cache directory (never a warm one left by other tests)."""
    root = tmp_path / "cache"
    monkeypatch.setenv(env.CACHE_DIR, str(root))
    return root


@pytest.fixture
def parses(monkeypatch) -> list[str]:
    """Every parse of a GGUF file's metadata from here on, by the gguf package (our reader) or by
    transformers (its tokenizer converter); this process's parsed readers are forgotten first."""
    calls: list[str] = []
    gguf_init = gguf.GGUFReader.__init__
    transformers_read = transformers_gguf_reader.read_gguf_metadata

    def counting_init(self, path, *args, **kwargs):
        calls.append(f"gguf {path}")
        gguf_init(self, path, *args, **kwargs)

    def counting_read(path, *args, **kwargs):
        calls.append(f"transformers {path}")
        return transformers_read(path, *args, **kwargs)

    monkeypatch.setattr(gguf.GGUFReader, "__init__", counting_init)
    monkeypatch.setattr(transformers_gguf_reader, "read_gguf_metadata", counting_read)
    _reader.cache_clear()
    yield calls
    _reader.cache_clear()


def load(path, with_weights=True):
    """What an engine start reads of a checkpoint, in a fresh process (no reader parsed yet)."""
    _reader.cache_clear()
    config = load_model_config(path)
    weights = dict(iter_weights(path)) if with_weights else tensor_shapes(path)
    return config, Tokenizer(path, config.eos_token_ids), weights


def assert_same(loaded, expected):
    config, tokenizer, weights = loaded
    want_config, want_tokenizer, want_weights = expected
    assert config == want_config
    assert weights.keys() == want_weights.keys()
    for name, value in weights.items():
        assert (
            torch.equal(value, want_weights[name]) if torch.is_tensor(value) else value == want_weights[name]
        )
    assert_same_tokenizer(tokenizer, want_tokenizer)


def assert_same_tokenizer(tokenizer, expected):
    for text in TEXTS:
        assert tokenizer.encode(text) == expected.encode(text), text
        assert tokenizer.encode_plain(text) == expected.encode_plain(text), text
    assert tokenizer.apply_chat_template(CHAT) == expected.apply_chat_template(CHAT)
    assert tokenizer.encode_chat(CHAT) == expected.encode_chat(CHAT)
    assert tokenizer.eos_token_ids == expected.eos_token_ids
    assert tokenizer.special_tokens == expected.special_tokens
    assert tokenizer.vocab_size == expected.vocab_size


def assert_transformers_tokenizer(tokenizer, gguf_file):
    """The tokenizer ``AutoTokenizer`` makes of the file, as the engine used before the cache."""
    from transformers import AutoTokenizer

    oracle = AutoTokenizer.from_pretrained(str(gguf_file.parent), gguf_file=gguf_file.name)
    for text in TEXTS:
        assert tokenizer.encode(text) == oracle.encode(text), text
    rendered = oracle.apply_chat_template(CHAT, tokenize=False, add_generation_prompt=True)
    assert tokenizer.apply_chat_template(CHAT) == rendered


@pytest.mark.parametrize("arch", GGUF_TWIN_ARCHES)
def test_a_warm_load_parses_nothing_and_serves_what_the_cold_one_derived(gguf_twins, cache, parses, arch):
    gguf_file = gguf_twins[arch][1]
    cold = load(gguf_file)
    assert parses, "the cold load derives the entry from the file"
    entry = entry_dir(gguf_file)
    assert entry.parent.parent == cache
    assert (entry / "metadata" / "metadata.json").is_file()
    assert (entry / "tokenizer" / "tokenizer.json").is_file()
    parses.clear()
    warm = load(gguf_file)
    assert parses == []
    assert_same(warm, cold)
    assert_transformers_tokenizer(warm[1], gguf_file)


def test_smollm2_warm_load_parses_nothing(cache, parses):
    path = smollm2_path()
    cold = load(path, with_weights=False)
    assert cold[1].has_chat_template
    parses.clear()
    warm = load(path, with_weights=False)
    assert parses == []
    assert_same(warm, cold)
    assert_transformers_tokenizer(warm[1], path)


def test_a_changed_file_is_derived_again(gguf_twins, cache, parses, tmp_path):
    gguf_file = shutil.copy(gguf_twins["qwen3"][1], tmp_path / "model.gguf")
    first = load(gguf_file)
    old_entry = entry_dir(gguf_file)
    stat = os.stat(gguf_file)
    os.utime(gguf_file, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    parses.clear()
    again = load(gguf_file)
    assert any(p.startswith("gguf") for p in parses) and any(p.startswith("transformers") for p in parses)
    assert entry_dir(gguf_file) != old_entry and entry_dir(gguf_file).is_dir()
    assert_same(again, first)


def test_a_damaged_entry_is_derived_again_not_an_error(gguf_twins, cache, parses):
    gguf_file = gguf_twins["llama"][1]
    cold = load(gguf_file)
    entry = entry_dir(gguf_file)
    for damaged in (entry / "tokenizer" / "tokenizer.json", entry / "metadata" / "metadata.json"):
        damaged.write_bytes(damaged.read_bytes()[: damaged.stat().st_size // 2])
    parses.clear()
    repaired = load(gguf_file)
    assert any(p.startswith("gguf") for p in parses) and any(p.startswith("transformers") for p in parses)
    assert_same(repaired, cold)
    parses.clear()
    assert_same(load(gguf_file), cold)
    assert parses == [], "the entry was written again"
    assert sorted(p.name for p in entry.iterdir()) == ["metadata", "tokenizer"]  # nothing left behind


def test_the_cache_can_be_turned_off(gguf_twins, tmp_path, monkeypatch, parses):
    monkeypatch.setenv(env.CACHE_DIR, "off")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    gguf_file = gguf_twins["qwen2"][1]
    first = load(gguf_file)
    parses.clear()
    assert_same(load(gguf_file), first)
    assert any(p.startswith("gguf") for p in parses), "every load derives again"
    assert entry_dir(gguf_file) is None
    assert list(tmp_path.iterdir()) == []


def test_a_part_another_process_published_first_is_kept(gguf_twins, cache):
    gguf_file = gguf_twins["qwen3"][1]
    part = "race"

    def save_while_another_process_wins(value, directory):
        (entry_dir(gguf_file) / part).mkdir()
        (entry_dir(gguf_file) / part / "value").write_text("theirs")
        (directory / "value").write_text(value)

    def read(directory):
        return (directory / "value").read_text()

    assert cached(gguf_file, part, lambda: "ours", save_while_another_process_wins, read) == "ours"
    assert cached(gguf_file, part, lambda: "never derived", save_while_another_process_wins, read) == "theirs"
    assert [p.name for p in entry_dir(gguf_file).iterdir()] == [part]  # no temporary directory left


def test_an_unwritable_cache_is_skipped(gguf_twins, tmp_path, monkeypatch):
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    monkeypatch.setenv(env.CACHE_DIR, str(blocker))
    model_dir, gguf_file = gguf_twins["qwen3"]
    assert load_model_config(gguf_file) == load_model_config(model_dir)
