import torch

from engine.sampling.params import SamplingParams
from engine.sampling.sampler import SamplingState, sample


def _state(seed=None, prompt=(), output=(), banned=(), **kwargs):
    gen = torch.Generator().manual_seed(seed) if seed is not None else None
    return SamplingState(SamplingParams(**kwargs), gen, list(prompt), list(output), list(banned))


def test_greedy_picks_argmax_and_reports_logprobs():
    logits = torch.tensor([[0.0, 3.0, 1.0, 2.0]])
    ids, lps = sample(logits, [_state(temperature=0.0, logprobs=2)])
    assert ids == [1]
    expected = torch.log_softmax(logits[0], -1)
    assert abs(lps[0].logprob - expected[1].item()) < 1e-6
    assert [t for t, _ in lps[0].top] == [1, 3]


def test_a_temperature_that_underflows_float32_is_greedy():
    # 1e-300 is 0.0 as a float32: dividing the logits by it made NaN probabilities, and a random token.
    logits = torch.randn(3, 50, generator=torch.Generator().manual_seed(0))
    states = [_state(seed=i, temperature=t) for i, t in enumerate([1e-300, 5e-324, 1e-6])]
    ids, _ = sample(logits, states)
    assert ids == logits.argmax(-1).tolist()


def test_top_k_one_is_greedy_even_at_high_temperature():
    logits = torch.randn(3, 50, generator=torch.Generator().manual_seed(0))
    states = [_state(seed=i, temperature=5.0, top_k=1) for i in range(3)]
    ids, _ = sample(logits, states)
    assert ids == logits.argmax(-1).tolist()


def test_top_p_keeps_only_the_nucleus():
    logits = torch.log(torch.tensor([[0.6, 0.3, 0.05, 0.05]]))
    seen = {sample(logits, [_state(seed=s, top_p=0.7)])[0][0] for s in range(200)}
    assert seen == {0, 1}


def test_min_p_drops_unlikely_tokens():
    logits = torch.log(torch.tensor([[0.5, 0.4, 0.1]]))
    seen = {sample(logits, [_state(seed=s, min_p=0.5)])[0][0] for s in range(200)}
    assert seen == {0, 1}


def test_banned_ids_and_penalties():
    logits = torch.tensor([[5.0, 4.0, 0.0]])
    assert sample(logits, [_state(temperature=0.0, banned=[0])])[0] == [1]
    # presence penalty 2 on token 0 (generated before) lets token 1 win
    assert sample(logits, [_state(temperature=0.0, output=[0], presence_penalty=2.0)])[0] == [1]
    # repetition penalty divides the positive logit of a prompt token: 5 / 2 < 4
    assert sample(logits, [_state(temperature=0.0, prompt=[0], repetition_penalty=2.0)])[0] == [1]


def test_seeded_row_is_independent_of_batch_neighbours():
    gen = torch.Generator().manual_seed(1)
    logits = torch.randn(6, 100, generator=gen)
    alone = [sample(logits[2:3], [_state(seed=42)])[0][0] for _ in range(1)]
    states = [_state(seed=i) for i in range(6)]
    states[2] = _state(seed=42)
    batched = sample(logits, states)[0][2]
    assert alone[0] == batched


def test_sampling_follows_the_distribution():
    probs = torch.tensor([0.7, 0.2, 0.1])
    state = _state(seed=0)
    counts = torch.zeros(3)
    for _ in range(2000):
        counts[sample(probs.log()[None], [state])[0][0]] += 1
    assert torch.allclose(counts / 2000, probs, atol=0.04)
