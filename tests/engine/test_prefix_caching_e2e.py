"""Acceptance 2: a request sharing a long prefix with a finished one reuses its full blocks."""

import torch

from engine import LLM, SamplingParams

GREEDY = SamplingParams(max_tokens=12, temperature=0.0, ignore_eos=True)


def _prompts():
    gen = torch.Generator().manual_seed(7)
    prefix = torch.randint(3, 500, (70,), generator=gen).tolist()  # 4 full blocks of 16 + 6
    return prefix + [11, 12, 13], prefix + [21, 22, 23, 24, 25]


def test_shared_prefix_is_cached_and_output_unchanged(tiny_qwen3):
    first, second = _prompts()
    cached_llm = LLM(tiny_qwen3, enable_prefix_caching=True)
    (out_first,) = cached_llm.generate([first], GREEDY)
    assert out_first.num_cached_tokens == 0
    (out_second,) = cached_llm.generate([second], GREEDY)
    assert out_second.num_cached_tokens == 64
    stats = cached_llm.stats()
    assert stats.prefix_cache_hits == 64
    assert stats.prefix_cache_queries == len(first) + len(second)

    plain = LLM(tiny_qwen3, enable_prefix_caching=False)
    (reference,) = plain.generate([second], GREEDY)
    assert reference.num_cached_tokens == 0
    assert out_second.token_ids == reference.token_ids


def test_generated_tokens_are_cached_too(tiny_qwen3):
    """A multi-turn follow-up that repeats prompt + answer hits blocks filled during decode."""
    first, _ = _prompts()
    llm = LLM(tiny_qwen3)
    (out,) = llm.generate([first], SamplingParams(max_tokens=30, temperature=0.0, ignore_eos=True))
    follow_up = first + out.token_ids + [5, 6]
    (again,) = llm.generate([follow_up], GREEDY)
    assert again.num_cached_tokens == (len(first) + 30 - 1) // 16 * 16


def test_cache_salt_isolates_tenants(tiny_qwen3):
    first, second = _prompts()
    llm = LLM(tiny_qwen3)
    core = llm.engine
    for rid, prompt, salt in (("a", first, "tenant-a"), ("b", second, "tenant-b"), ("c", second, "tenant-a")):
        core.add_request(prompt, GREEDY, request_id=rid, cache_salt=salt)
        while core.has_unfinished():
            outs = core.step()
        assert outs[-1].finished
        cached = outs[-1].num_cached_tokens
        assert cached == {"a": 0, "b": 0, "c": 64}[rid]
