"""Prefill/decode disaggregation in the engine: a prefill engine (kv_role prefill) writes a finished
request's full blocks through to the shared tier before it answers, with no eviction needed; a decode
engine onloads them on admission and gives the greedy tokens of an engine that computed everything."""

import pytest
import torch

from engine import LLM, SamplingParams
from engine.config import EngineConfig

GREEDY = SamplingParams(max_tokens=12, temperature=0.0, ignore_eos=True)
PREFILL_ONLY = SamplingParams(max_tokens=1, temperature=0.0, ignore_eos=True)
POOL = dict(num_gpu_blocks=32, max_model_len=256)


def _prompt():
    gen = torch.Generator().manual_seed(11)
    return torch.randint(3, 500, (75,), generator=gen).tolist()  # 4 full blocks of 16 + 11


def test_decode_engine_continues_from_the_prefill_engines_blocks(tiny_qwen3, tmp_path):
    prompt = _prompt()
    (expected,) = LLM(tiny_qwen3, enable_prefix_caching=False, **POOL).generate([prompt], GREEDY)
    prefill = LLM(tiny_qwen3, kv_role="prefill", kv_shared_cache_dir=str(tmp_path), **POOL)
    prefill.generate([prompt], PREFILL_ONLY)
    shared = prefill.stats().kv_tiers["shared"]
    assert shared.offloads == 4  # written through at the end of the request, nothing evicted

    decode = LLM(tiny_qwen3, kv_role="decode", kv_shared_cache_dir=str(tmp_path), **POOL)
    (out,) = decode.generate([prompt], GREEDY)
    assert out.num_cached_tokens == 64
    assert decode.stats().kv_tiers["shared"].hit_tokens == 64
    assert out.token_ids == expected.token_ids


def test_a_mixed_engine_writes_nothing_until_it_evicts(tiny_qwen3, tmp_path):
    mixed = LLM(tiny_qwen3, kv_shared_cache_dir=str(tmp_path), **POOL)
    mixed.generate([_prompt()], PREFILL_ONLY)
    assert mixed.stats().kv_tiers["shared"].offloads == 0


def test_an_aborted_prefill_writes_nothing(tiny_qwen3, tmp_path):
    prefill = LLM(tiny_qwen3, kv_role="prefill", kv_shared_cache_dir=str(tmp_path), **POOL)
    core = prefill.engine
    core.add_request(_prompt(), GREEDY, request_id="a")
    core.step()  # the prompt's KV is computed
    core.abort("a")
    assert core.stats().kv_tiers["shared"].offloads == 0


@pytest.mark.parametrize("role", ["prefill", "decode"])
def test_a_role_needs_the_shared_tier(tmp_path, role):
    with pytest.raises(ValueError, match="kv_role .* needs kv_shared_cache_dir"):
        EngineConfig(model_dir=tmp_path, kv_role=role)
    with pytest.raises(ValueError, match="kv_role"):
        EngineConfig(
            model_dir=tmp_path, kv_role=role, kv_shared_cache_dir=str(tmp_path), enable_prefix_caching=False
        )
    EngineConfig(model_dir=tmp_path, kv_role=role, kv_shared_cache_dir=str(tmp_path))


def test_an_unknown_role_is_refused(tmp_path):
    with pytest.raises(ValueError, match="kv_role must be one of mixed, prefill, decode"):
        EngineConfig(model_dir=tmp_path, kv_role="both")
