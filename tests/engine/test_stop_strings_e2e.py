"""Acceptance 5 (engine half): stop strings end generation and never leak into the text."""

from engine import LLM, SamplingParams


def _pick_stop(text: str) -> str:
    for i in range(4, len(text) - 3):
        piece = text[i : i + 3]
        if piece.isascii() and piece.isprintable() and text.find(piece) == i:
            return piece
    raise AssertionError(f"no usable stop string in {text!r}")


def test_stop_string_cuts_text_and_streaming_never_leaks(tiny_qwen3):
    llm = LLM(tiny_qwen3)
    prompt = "class HelpFormatter(object):"
    # seeded sampling: deterministic, and livelier text than greedy on a random model
    sampled = {"max_tokens": 40, "temperature": 1.0, "seed": 5, "ignore_eos": True}
    (full,) = llm.generate([prompt], SamplingParams(**sampled))
    stop = _pick_stop(full.text)
    cut = full.text.index(stop)

    core = llm.engine
    core.add_request(prompt, SamplingParams(**sampled, stop=[stop]), "s")
    streamed = ""
    while core.has_unfinished():
        for out in core.step():
            streamed += out.new_text
            assert stop not in streamed
            last = out
    assert last.finished and last.finish_reason == "stop" and last.stop_reason == stop
    assert streamed == last.text == full.text[:cut]
    assert len(last.token_ids) < 40

    (kept,) = llm.generate([prompt], SamplingParams(**sampled, stop=[stop], include_stop_str_in_output=True))
    assert kept.text == full.text[: cut + len(stop)]


def test_stop_token_ids_and_eos(tiny_qwen3):
    llm = LLM(tiny_qwen3)
    (full,) = llm.generate(["import os"], SamplingParams(max_tokens=20, temperature=0.0, ignore_eos=True))
    stop_id = full.token_ids[5]
    first = full.token_ids.index(stop_id)
    (out,) = llm.generate(
        ["import os"], SamplingParams(max_tokens=20, temperature=0.0, stop_token_ids=[stop_id])
    )
    assert out.token_ids == full.token_ids[: first + 1]
    assert out.finish_reason == "stop" and out.stop_reason == stop_id
    (short,) = llm.generate(["import os"], SamplingParams(max_tokens=3, temperature=0.0, ignore_eos=True))
    assert short.finish_reason == "length" and len(short.token_ids) == 3


def test_logprobs_are_returned_per_token(tiny_qwen3):
    llm = LLM(tiny_qwen3)
    (out,) = llm.generate(
        ["x = 1"], SamplingParams(max_tokens=5, temperature=0.0, logprobs=3, ignore_eos=True)
    )
    assert len(out.logprobs) == 5
    for token_id, lp in zip(out.token_ids, out.logprobs, strict=True):
        assert lp.token_id == token_id and lp.logprob <= 0
        assert len(lp.top) == 3 and lp.top[0][0] == token_id  # greedy: chosen token is the top one
