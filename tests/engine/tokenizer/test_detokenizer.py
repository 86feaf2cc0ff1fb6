"""Acceptance 5 (detokenizer half): multi-byte characters and stop strings across token pieces."""

import pytest

from engine.tokenizer import IncrementalDetokenizer, Tokenizer


@pytest.fixture(scope="module")
def tok(tiny_qwen3):
    return Tokenizer(tiny_qwen3)


def test_three_byte_character_split_over_tokens_comes_out_whole(tok):
    ids = tok.encode_plain("price: 5€ ok")
    euro = tok.encode_plain("€")
    assert len(euro) >= 2, "the tiny BPE must split € (3 UTF-8 bytes) over several tokens"
    detok = IncrementalDetokenizer(tok.backend)
    pieces = [detok.push([i]) for i in ids]
    assert all("\ufffd" not in p for p in pieces)
    assert "€" in pieces  # released in one piece, once its last byte arrived
    assert "".join(pieces) + detok.flush() == detok.text == "price: 5€ ok"


def test_incomplete_character_is_held_until_flush(tok):
    euro = tok.encode_plain("€")
    detok = IncrementalDetokenizer(tok.backend)
    assert detok.push(euro[:-1]) == ""
    assert detok.flush() == tok.decode(euro[:-1])  # never completed: the tokenizer's own rendering


def test_stop_string_is_held_back_then_cut(tok):
    text = "alpha beta STOP gamma"
    detok = IncrementalDetokenizer(tok.backend, stop=["STOP"])
    released = ""
    for i in tok.encode_plain(text):
        released += detok.push([i])
        assert "S" not in released  # no piece of the stop string ever leaves
    assert detok.stop_string == "STOP"
    assert detok.text == released == "alpha beta "
    assert detok.push(tok.encode_plain(" more")) == "" and detok.flush() == ""


def test_held_back_prefix_is_released_when_it_stops_matching(tok):
    detok = IncrementalDetokenizer(tok.backend, stop=["</end>"])
    out = "".join(detok.push([i]) for i in tok.encode_plain("a </en b"))
    assert detok.stop_string is None
    assert out + detok.flush() == "a </en b"
    held = IncrementalDetokenizer(tok.backend, stop=["</end>"])
    assert "".join(held.push([i]) for i in tok.encode_plain("a </en")) == "a "
    assert held.flush() == "</en"  # finishing for another reason releases it


def test_include_stop_string_and_earliest_match_wins(tok):
    detok = IncrementalDetokenizer(tok.backend, stop=["b", "xa"], include_stop_str_in_output=True)
    out = "".join(detok.push([i]) for i in tok.encode_plain("zzxab"))
    assert out == detok.text == "zzxa" and detok.stop_string == "xa"


def test_special_tokens_skipped_or_kept(tok):
    ids = tok.encode("hi<|im_end|>")
    assert tok.hf.convert_tokens_to_ids("<|im_end|>") in ids
    skip = IncrementalDetokenizer(tok.backend, skip_special_tokens=True)
    keep = IncrementalDetokenizer(tok.backend, skip_special_tokens=False)
    assert skip.push(ids) + skip.flush() == "hi"
    assert keep.push(ids) + keep.flush() == "hi<|im_end|>"
