import torch

from kernels._arrival_counters import arrival_counters


def test_counters_are_zero_and_shared_until_outgrown():
    first = arrival_counters(torch.device("cpu"), 10)
    assert first.dtype == torch.int32 and first.numel() >= 10 and not first.any()
    assert arrival_counters("cpu", first.numel()) is first
    grown = arrival_counters("cpu", first.numel() + 1)
    assert grown is not first and grown.numel() > first.numel() and not grown.any()
    assert arrival_counters("cpu", 3) is grown
