import random

import pytest

from engine.kv.block_hash import hash_chain
from gateway.chain import prompt_hash_chain


@pytest.mark.parametrize("block_size", [1, 4, 16, 17])
@pytest.mark.parametrize("extra", [None, b"", b"tenant-7", "sél".encode()])
def test_same_digests_as_the_engine(block_size, extra):
    rng = random.Random(block_size)
    for length in (0, 3, block_size, 5 * block_size + 3, 301):
        tokens = [rng.randrange(2**31) for _ in range(length)]
        assert prompt_hash_chain(tokens, block_size, extra) == hash_chain(tokens, block_size, extra)
