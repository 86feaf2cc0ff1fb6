"""On the real SmolLM2-135M-Instruct (CPU): greedy tokens with n-gram and with draft-model
speculation (the model drafting for itself: same tokenizer, every draft token right) equal the
tokens without speculation, in one batch with a seeded sampled request (whose tokens match too)."""

import pytest

from engine import LLM, SamplingParams
from engine.testing.smollm2 import smollm2_path

# Four engines load the real model (the draft-model run loads it twice); on 2 shared cores that
# alone can take minutes.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]
QUOTE = "Repeat exactly, replacing fox with cat: 'The quick brown fox jumps over the lazy dog.'"
GREEDY = SamplingParams(max_tokens=8, temperature=0.0, ignore_eos=True)
SEEDED = SamplingParams(max_tokens=8, temperature=0.7, top_p=0.9, seed=5, ignore_eos=True)


def test_ngram_and_draft_model_speculation_keep_smollm2s_tokens():
    model = str(smollm2_path())
    runs, stats = {}, {}
    for mode, extra in (
        ("off", {}),
        ("ngram", {"speculative_method": "ngram"}),
        (
            "draft_model",
            {"speculative_method": "draft_model", "speculative_model": model, "num_speculative_tokens": 2},
        ),
    ):
        llm = LLM(model, device="cpu", dtype="float32", **extra)
        edit = llm.tokenizer.encode_chat([{"role": "user", "content": QUOTE}])
        outs = llm.generate([edit, edit], [GREEDY, SEEDED])
        runs[mode] = [o.token_ids for o in outs]
        stats[mode] = llm.stats()
    assert runs["ngram"] == runs["off"] and runs["draft_model"] == runs["off"]
    assert stats["ngram"].spec_decode_num_accepted_tokens > 0
    assert stats["draft_model"].spec_decode_num_accepted_tokens > 0
