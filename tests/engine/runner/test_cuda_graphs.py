"""The decode-graph input path (static buffers, padding to captured sizes), run eagerly on CPU.

A CUDA graph cannot be captured here, so ``use_eager`` replays the same forward over the same
static buffers; what is checked is everything around the graph: packing, padding rows, block
tables wider or narrower than last step, and that the results equal the plain eager engine's.
"""

import gc
import random

import pytest
import torch

from engine import LLM, SamplingParams
from engine.runner.cuda_graphs import capture_sizes


def _prompts(n, seed=5):
    rng = random.Random(seed)
    return [[rng.randrange(3, 500) for _ in range(rng.randrange(2, 70))] for _ in range(n)]


def test_capture_sizes_cover_every_batch_up_to_the_max():
    assert capture_sizes(1) == [1]
    assert capture_sizes(20) == [1, 2, 4, 8, 16, 20]
    assert capture_sizes(64) == [1, 2, 4, 8, 16, 32, 48, 64]


@pytest.mark.parametrize("arch", ["llama", "qwen3", "qwen3_moe", "deepseek_v3", "gemma2", "gemma3"])
def test_graph_path_gives_the_eager_tokens(tiny_models, arch):
    prompts = _prompts(6)
    params = [SamplingParams(max_tokens=12 + 3 * i, temperature=0.0, ignore_eos=True) for i in range(6)]
    expected = [
        o.token_ids for o in LLM(tiny_models[arch], device="cpu", max_num_seqs=6).generate(prompts, params)
    ]

    llm = LLM(tiny_models[arch], device="cpu", max_num_seqs=6)
    runner = llm.engine.runner
    runner.capture_decode_graphs(5, eager=True)  # 6 running requests exceed it: eager fallback too
    calls = []
    original = runner.graphs.run
    runner.graphs.run = lambda out, *a: calls.append(len(out.scheduled)) or original(out, *a)
    actual = [o.token_ids for o in llm.generate(prompts, params)]
    assert actual == expected
    assert calls and min(calls) < max(calls)  # several padded sizes were replayed
    assert all(n <= 5 for n in calls)


@pytest.mark.parametrize("arch", ["llama", "qwen3_moe", "deepseek_v3", "mistral"])  # deepseek_v3: latent attention
def test_prompt_tails_after_a_prefix_hit_run_through_the_graphs_with_the_eager_tokens(tiny_models, arch):
    """A prefix-cache hit leaves 1-16 prompt tokens to compute: through the graphs (one row per
    token, the last row's logits sampled) the tokens equal the eager engine's."""
    rng = random.Random(11)
    prefix = [rng.randrange(3, 500) for _ in range(48)]  # three full blocks, cached by the first prompt
    tails = (7, 1, 16, 4, 11)
    prompts = [prefix + [rng.randrange(3, 500) for _ in range(k)] for k in tails]
    params = SamplingParams(max_tokens=6, temperature=0.0, ignore_eos=True)

    def run(graphs: bool):
        llm = LLM(tiny_models[arch], device="cpu", max_num_seqs=4)
        if graphs:
            llm.engine.runner.capture_decode_graphs(16, eager=True)
        outs = [llm.generate([prompt], params)[0] for prompt in prompts]  # one at a time: tails alone
        assert all(o.num_cached_tokens == 48 for o in outs[1:])
        return [o.token_ids for o in outs], llm.engine.runner.graphs

    eager, _ = run(graphs=False)
    graphed, graphs = run(graphs=True)
    assert graphed == eager
    # Each later prompt's tail in one step (a one-token tail is a plain one-row step).
    assert graphs.tail_steps_run == sum(k > 1 for k in tails[1:])


def test_verify_steps_carrying_prompt_tails_run_through_the_graphs(tiny_llama):
    """A request admitted after a prefix hit while others speculate: its prompt tail's rows ride in
    the verify step's graph beside the draft rows (only its last row samples), and every request
    gets the tokens of speculation off."""
    rng = random.Random(13)
    prefix = [rng.randrange(3, 300) for _ in range(48)]  # three full blocks
    prompts = []
    for _ in range(8):
        phrase = [rng.randrange(3, 300) for _ in range(rng.randrange(3, 6))]
        prompts.append(prefix + (phrase * 3)[:14])  # a tail of 14 tokens, repeating: n-gram drafts
    params = [SamplingParams(max_tokens=10 + 5 * (i % 3), temperature=0.0, ignore_eos=True) for i in range(8)]

    def run(**kwargs):
        # The tiny Llama repeats its prompts' phrases (n-gram drafts); the tiny MoE and DeepSeek do not.
        llm = LLM(tiny_llama, device="cpu", dtype="float32", max_num_seqs=3, **kwargs)
        llm.generate([prefix + [1]], SamplingParams(max_tokens=1))  # caches the prefix
        return llm

    off = [o.token_ids for o in run().generate(prompts, params)]
    llm = run(speculative_method="ngram", speculative_scheduling="fixed")
    runner = llm.engine.runner
    runner.capture_decode_graphs(64, eager=True)
    mixed = []
    original = runner.graphs.run
    runner.graphs.run = lambda out, *a: mixed.append(
        out.num_draft_tokens > 0 and any(s.num_tokens > 1 + s.num_draft_tokens for s in out.scheduled)
    ) or original(out, *a)
    assert [o.token_ids for o in llm.generate(prompts, params)] == off
    assert any(mixed)  # some verify step carried a prompt tail through the graphs


def test_graph_logits_share_one_buffer_whatever_the_sizes(tiny_llama):
    """Every captured size writes its logits into one [largest size, vocab] fp32 buffer: a tensor
    per size would hold sum(sizes) x vocab floats (~38 GB for 1,536 rows of a 128k vocabulary)."""
    llm = LLM(tiny_llama, device="cpu", max_num_seqs=4)
    runner = llm.engine.runner
    runner.capture_decode_graphs(96, eager=True)
    graphs = runner.graphs
    llm.generate(_prompts(3), SamplingParams(max_tokens=4, temperature=0.0, ignore_eos=True))
    vocab = llm.engine.model_config.vocab_size
    assert graphs.logits.shape == (96, vocab) and graphs.logits.dtype == torch.float32
    assert graphs.steps_run > 0


@pytest.mark.parametrize(
    ("settings", "rows"),
    [
        (dict(max_num_seqs=64), 64),
        (dict(max_num_seqs=8), 16),  # a prompt tail of TAIL_ROWS tokens still fits
        (dict(max_num_seqs=64, speculative_method="ngram"), 384),  # 64 x (1 + 5 drafted)
        (dict(max_num_seqs=64, speculative_method="ngram", num_speculative_tokens=2), 192),
        (dict(max_num_seqs=256, speculative_method="draft_model", speculative_model="d"), 1536),
        (dict(max_num_seqs=512, speculative_method="ngram"), 2048),  # one step's token budget
        (dict(max_num_seqs=64, speculative_method="mtp"), 64),  # MTP verifies eagerly (hidden states)
        (dict(max_num_seqs=64, max_cudagraph_capture_size=200), 200),
        (dict(max_num_seqs=64, max_cudagraph_capture_size=4096), 2048),
    ],
)
def test_largest_graph_holds_whole_verify_steps_of_the_proposers_that_replay_them(settings, rows):
    from engine.config import EngineConfig
    from engine.runner.cuda_graphs import max_graph_rows

    assert max_graph_rows(EngineConfig("m", **settings)) == rows


def test_max_cudagraph_capture_size_must_be_positive():
    from engine.config import EngineConfig

    with pytest.raises(ValueError, match="max_cudagraph_capture_size must be a positive integer"):
        EngineConfig("m", max_cudagraph_capture_size=0)


def _repeating_prompts(n, seed=5):
    """Prompts that repeat a phrase, so n-gram lookup drafts (some drafts right, most wrong)."""
    rng = random.Random(seed)
    prompts = []
    for _ in range(n):
        phrase = [rng.randrange(3, 300) for _ in range(rng.randrange(3, 9))]
        prompts.append([rng.randrange(3, 300) for _ in range(rng.randrange(1, 20))] + phrase * 3)
    return prompts


@pytest.mark.parametrize("arch", ["llama", "qwen3_moe", "deepseek_v3", "gemma2"])  # gemma2: a window group
def test_verify_steps_through_the_graphs_give_the_eager_verify_tokens(tiny_models, arch):
    """A verify step's requests expand to one graph row per fed token; steps whose rows exceed the
    largest captured size (8 here) verify eagerly, next to graphed ones."""
    prompts = _repeating_prompts(6)
    params = SamplingParams(max_tokens=24, temperature=0.0, ignore_eos=True)
    kwargs = dict(device="cpu", dtype="float32", max_num_seqs=6, speculative_method="ngram")
    kwargs["speculative_scheduling"] = "fixed"

    def run(graphs: bool):
        llm = LLM(tiny_models[arch], **kwargs)
        runner = llm.engine.runner
        verify_steps = []
        original = runner._verify_step
        runner._verify_step = lambda logits, *a: verify_steps.append(logits.shape[0]) or original(logits, *a)
        if graphs:
            runner.capture_decode_graphs(8, eager=True)
        outs = [o.token_ids for o in llm.generate(prompts, params)]
        return outs, llm.stats(), verify_steps, runner.graphs

    eager, eager_stats, _, _ = run(graphs=False)
    graphed, stats, verify_steps, graphs = run(graphs=True)
    assert graphed == eager
    assert stats.spec_decode_num_accepted_tokens == eager_stats.spec_decode_num_accepted_tokens > 0
    assert 0 < graphs.verify_steps_run < len(verify_steps)  # some graphed, some too large
    assert graphs.windowed == (arch == "gemma2")  # its sliding layers' own block tables, per row
    assert any(rows > 8 for rows in verify_steps)
    plain = LLM(tiny_models[arch], device="cpu", dtype="float32")
    assert graphed == [o.token_ids for o in plain.generate(prompts, params)]  # speculation off


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("arch", ["llama", "deepseek_v3"])
def test_captured_graphs_verify_like_the_eager_path(tiny_models, arch):
    """Real CUDA graphs (captured up to 16 rows): verify steps replayed from them emit the tokens
    and accept the drafts that eager verification does, and greedy output equals speculation off."""
    prompts = _repeating_prompts(6)
    params = SamplingParams(max_tokens=24, temperature=0.0, ignore_eos=True)
    # Three engines one after the other in this process: each takes a small share of the memory
    # and is shut down before the next (the default 0.9 would leave the next no KV blocks).
    kwargs = dict(device="cuda", dtype="float32", max_num_seqs=16, gpu_memory_utilization=0.2)
    spec = dict(speculative_method="ngram", speculative_scheduling="fixed")

    def run(**more):
        llm = LLM(tiny_models[arch], **kwargs, **more)
        outs = [o.token_ids for o in llm.generate(prompts, params)]
        graphs = llm.engine.runner.graphs
        result = outs, llm.stats(), None if graphs is None else graphs.verify_steps_run
        llm.shutdown()
        del llm, graphs
        gc.collect()
        torch.cuda.empty_cache()  # the allocator's cached blocks count as used for the next engine
        return result

    eager, eager_stats, no_graphs = run(enforce_eager=True, **spec)
    graphed, stats, graphed_verify_steps = run(**spec)
    off, _, _ = run()
    assert no_graphs is None
    assert graphed_verify_steps > 0
    assert graphed == eager == off
    assert stats.spec_decode_num_accepted_tokens == eager_stats.spec_decode_num_accepted_tokens > 0


def test_sampled_requests_still_use_the_full_sampler(tiny_llama):
    prompts = _prompts(3, seed=9)
    params = SamplingParams(max_tokens=10, temperature=0.8, top_k=20, seed=7, ignore_eos=True)
    expected = [o.token_ids for o in LLM(tiny_llama, device="cpu").generate(prompts, params)]
    llm = LLM(tiny_llama, device="cpu")
    llm.engine.runner.capture_decode_graphs(4, eager=True)
    assert [o.token_ids for o in llm.generate(prompts, params)] == expected


def test_graphs_need_cuda_unless_eager(tiny_llama):
    llm = LLM(tiny_llama, device="cpu")
    with pytest.raises(ValueError, match="CUDA"):
        llm.engine.runner.capture_decode_graphs(4)


def _interleaved(tiny_qwen3, tmp_path):
    """Qwen3's two layers as a windowed (8 tokens) and a full-attention layer."""
    import json
    import shutil

    path = shutil.copytree(tiny_qwen3, tmp_path / "interleaved")
    raw = json.loads((path / "config.json").read_text())
    raw.update(sliding_window=8, use_sliding_window=True, layer_types=["sliding_attention", "full_attention"])
    (path / "config.json").write_text(json.dumps(raw))
    return path


@pytest.mark.parametrize("model", ["mistral", "interleaved"])
def test_windowed_layers_decode_through_the_graphs_with_the_eager_tokens(tiny_models, tiny_qwen3, tmp_path, model):
    """Windowed layers' blocks leave as decoding moves on (their own window group beside full
    attention, or the one pool of an all-windowed Mistral): the graphs' block tables and sequence
    lengths follow each request's shifted run and give the eager engine's tokens."""
    path = tiny_models["mistral"] if model == "mistral" else _interleaved(tiny_qwen3, tmp_path)
    prompts = _prompts(4, seed=9)
    params = SamplingParams(max_tokens=40, temperature=0.0, ignore_eos=True)  # past several blocks
    expected = [o.token_ids for o in LLM(path, device="cpu", max_num_seqs=4).generate(prompts, params)]
    llm = LLM(path, device="cpu", max_num_seqs=4)
    assert llm.engine.kv.window is not None
    runner = llm.engine.runner
    runner.capture_decode_graphs(4, eager=True)
    bases = []
    original = runner.graphs.run
    runner.graphs.run = lambda out, *a: bases.extend(
        s.window_base if s.window_block_ids is not None else s.block_base for s in out.scheduled
    ) or original(out, *a)
    assert [o.token_ids for o in llm.generate(prompts, params)] == expected
    assert bases and max(bases) >= 2  # windows moved on by whole blocks while in the graphs


@pytest.mark.parametrize("windowed", [False, True])
def test_every_graph_input_lives_in_a_buffer_the_graphs_keep(tiny_llama, windowed):
    """A captured graph keeps no tensor alive: an input made for the capture and then dropped has its
    memory reused under the graph (batch-invariant decode read query offsets freed that way and
    differed from eager in 184 of 256 rows on the H200, session 13)."""
    from engine.runner.cuda_graphs import DecodeGraphs

    model = LLM(tiny_llama, device="cpu").engine.runner.model
    graphs = DecodeGraphs(model, 8, 4, 16, torch.device("cpu"), windowed=windowed)
    kept = {t.untyped_storage().data_ptr() for t in vars(graphs).values() if isinstance(t, torch.Tensor)}
    for size in graphs.sizes:
        meta = graphs._meta(size)
        for part in (meta, meta.window) if windowed else (meta,):
            for name, value in vars(part).items():
                if isinstance(value, torch.Tensor):
                    assert value.untyped_storage().data_ptr() in kept, f"size {size}: {name} is not kept"
