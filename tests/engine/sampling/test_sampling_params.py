import pytest

from engine.sampling.params import SamplingParams


def test_defaults_and_normalisation():
    p = SamplingParams(stop="END", top_k=-1)
    assert p.stop == ["END"] and p.top_k == 0
    assert SamplingParams(temperature=0).greedy
    assert not SamplingParams().needs_penalties
    assert SamplingParams(presence_penalty=0.5).needs_penalties


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_tokens": 0}, "max_tokens"),
        ({"temperature": -0.1}, "temperature"),
        ({"temperature": float("nan")}, "temperature"),
        ({"top_p": 0.0}, "top_p"),
        ({"top_k": -2}, "top_k"),
        ({"min_p": 1.5}, "min_p"),
        ({"repetition_penalty": 0.0}, "repetition_penalty"),
        ({"frequency_penalty": 3.0}, "frequency_penalty"),
        ({"presence_penalty": -2.5}, "presence_penalty"),
        ({"seed": "7"}, "seed"),
        ({"seed": 2**64}, "seed"),
        ({"seed": -(2**63) - 1}, "seed"),
        ({"stop": [""]}, "stop"),
        ({"stop_token_ids": [-1]}, "stop_token_ids"),
        ({"min_tokens": 5, "max_tokens": 2}, "min_tokens"),
        ({"logprobs": 21}, "logprobs"),
        ({"logprobs": True}, "logprobs"),
    ],
)
def test_invalid_params_raise(kwargs, message):
    with pytest.raises(ValueError, match=message):
        SamplingParams(**kwargs)
