import pytest
import torch

from engine.graph_timing import time_in_graph


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_times_every_captured_call():
    x = torch.ones(1 << 20, device="cuda")
    calls = []

    def add(i: int) -> None:
        calls.append(i)
        x.add_(1.0)

    us = time_in_graph(add, 8, replays=3)
    assert us > 0
    assert calls == [0, 1] + list(range(8))  # two warm-up calls, then the eight captured
    # Warm-up (2) + capture does not run the kernels; the first replay and 3 timed replays each add 8.
    assert x[0].item() == 1 + 2 + 8 * 4
