"""What makes a prompt servable (token-id prompts; text prompts go through the tokenizer and are
covered by the client contract suite)."""

import enum

import pytest

from engine.core.prompt_validation import validated_prompt_ids
from engine.sampling.params import SamplingParams

VOCAB, MAX_LEN = 100, 16


class Token(enum.IntEnum):
    SEVEN = 7


def ids(prompt):
    return validated_prompt_ids(prompt, SamplingParams(), None, VOCAB, MAX_LEN)


def test_token_ids_as_list_tuple_or_int_subclass():
    assert ids([1, 2, 99]) == [1, 2, 99]
    assert ids((3, 4)) == [3, 4]
    assert ids([Token.SEVEN, 8]) == [7, 8]


@pytest.mark.parametrize(
    "prompt, message",
    [
        ([1, True], "string or a list of token ids"),
        ([1, 2.0], "string or a list of token ids"),
        ({"ids": [1]}, "string or a list of token ids"),
        ([5, VOCAB, -1], f"token id {VOCAB} is outside the vocabulary"),
        ([-3], "token id -3 is outside the vocabulary"),
        ([], "prompt is empty"),
        ([1] * MAX_LEN, f"max_model_len={MAX_LEN}"),
    ],
)
def test_what_is_refused(prompt, message):
    with pytest.raises(ValueError, match=message):
        ids(prompt)


def test_params_must_be_sampling_params():
    with pytest.raises(ValueError, match="SamplingParams"):
        validated_prompt_ids([1], {"max_tokens": 2}, None, VOCAB, MAX_LEN)
