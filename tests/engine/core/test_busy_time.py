"""A step's time is shared among its rows: prompt rows to prefill, generated rows to decode."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from engine.core.busy_time import BusySeconds
from engine.scheduler.output import SchedulerOutput


def scheduled(prompt_len: int, start: int, num_tokens: int):
    request = SimpleNamespace(num_prompt_tokens=prompt_len)
    return SimpleNamespace(request=request, start=start, num_tokens=num_tokens)


def test_a_mixed_step_is_split_by_rows():
    busy = BusySeconds()
    # 96 prompt rows (the uncached part of a prompt after a 32-token prefix hit) and 3 generated rows.
    out = SchedulerOutput([scheduled(128, 32, 96), scheduled(10, 10, 1), scheduled(10, 12, 2)])
    busy.add(out, 0.99)
    assert busy.as_dict() == pytest.approx({"prefill": 0.96, "decode": 0.03})


def test_a_chunk_across_the_prompt_end_counts_its_prompt_part_only():
    busy = BusySeconds()
    busy.add(SchedulerOutput([scheduled(10, 8, 4)]), 1.0)  # positions 8, 9 are prompt; 10, 11 are not
    assert busy.as_dict() == pytest.approx({"prefill": 0.5, "decode": 0.5})


def test_an_empty_step_adds_nothing():
    busy = BusySeconds()
    busy.add(SchedulerOutput([]), 1.0)
    assert busy.as_dict() == {"prefill": 0.0, "decode": 0.0}
