"""Prefix hits served from the KV tiers below a device pool too small to keep the prefix: the same
greedy output as recomputing, and the disk tier still serves after the engine restarts."""

import torch

from engine import LLM, SamplingParams

GREEDY = SamplingParams(max_tokens=12, temperature=0.0, ignore_eos=True)
SMALL_POOL = dict(num_gpu_blocks=8, max_model_len=128)  # one 128-token sequence, nothing spare


def _prompts():
    gen = torch.Generator().manual_seed(7)
    prefix = torch.randint(3, 500, (70,), generator=gen).tolist()  # 4 full blocks of 16 + 6
    filler = torch.randint(3, 500, (110,), generator=gen).tolist()  # takes all 8 blocks: evicts the prefix
    return prefix + [11, 12, 13], filler, prefix + [21, 22, 23, 24, 25]


def _reference(model_dir, prompt):
    (out,) = LLM(model_dir, enable_prefix_caching=False, **SMALL_POOL).generate([prompt], GREEDY)
    return out.token_ids


def _serve_with_eviction(llm, first, filler, second):
    llm.generate([first], GREEDY)
    llm.generate([filler], GREEDY)
    assert llm.stats().prefix_cache_hits == 0
    (out,) = llm.generate([second], GREEDY)
    return out


def test_host_tier_serves_the_evicted_prefix(tiny_qwen3):
    first, filler, second = _prompts()
    llm = LLM(tiny_qwen3, kv_host_cache_mib=16, **SMALL_POOL)
    out = _serve_with_eviction(llm, first, filler, second)
    assert out.num_cached_tokens == 64
    host = llm.stats().kv_tiers["host"]
    assert host.hit_tokens == 64 and host.onloads == 4
    assert host.offloads >= 4 and host.bytes_held > 0
    assert out.token_ids == _reference(tiny_qwen3, second)


def test_disk_tier_serves_the_prefix_and_survives_a_restart(tiny_qwen3, tmp_path):
    first, filler, second = _prompts()
    expected = _reference(tiny_qwen3, second)
    llm = LLM(tiny_qwen3, kv_disk_cache_dir=str(tmp_path), **SMALL_POOL)
    out = _serve_with_eviction(llm, first, filler, second)
    assert out.num_cached_tokens == 64
    assert llm.stats().kv_tiers["disk"].hit_tokens == 64
    assert out.token_ids == expected
    llm.engine.shutdown()

    restarted = LLM(tiny_qwen3, kv_disk_cache_dir=str(tmp_path), **SMALL_POOL)
    (again,) = restarted.generate([second], GREEDY)
    assert again.num_cached_tokens == 64
    assert restarted.stats().kv_tiers["disk"].hit_tokens == 64
    assert again.token_ids == expected


def test_tiers_never_serve_another_tenant(tiny_qwen3):
    first, filler, second = _prompts()
    llm = LLM(tiny_qwen3, kv_host_cache_mib=16, **SMALL_POOL)
    core = llm.engine
    runs = (
        ("a", first, "tenant-a"),
        ("f", filler, None),
        ("b", second, "tenant-b"),
        ("c", second, "tenant-a"),
    )
    cached = {}
    for rid, prompt, salt in runs:
        core.add_request(prompt, GREEDY, request_id=rid, cache_salt=salt)
        while core.has_unfinished():
            outs = core.step()
        cached[rid] = outs[-1].num_cached_tokens
    assert cached == {"a": 0, "f": 0, "b": 0, "c": 64}  # only tenant-a's own prefix comes back
    assert core.stats().kv_tiers["host"].hit_tokens == 64


def test_a_replica_hits_the_prefix_another_replica_left_in_the_shared_tier(tiny_qwen3, tmp_path):
    first, filler, second = _prompts()
    one = LLM(tiny_qwen3, kv_shared_cache_dir=str(tmp_path), **SMALL_POOL)
    one.generate([first], GREEDY)
    one.generate([filler], GREEDY)  # evicts the prefix into the shared directory
    two = LLM(tiny_qwen3, kv_shared_cache_dir=str(tmp_path), **SMALL_POOL)
    (out,) = two.generate([second], GREEDY)
    assert out.num_cached_tokens == 64
    assert two.stats().kv_tiers["shared"].hit_tokens == 64
    assert out.token_ids == _reference(tiny_qwen3, second)
