"""Leaving the process group never hangs the replica's shutdown."""

from __future__ import annotations

import threading

import torch.distributed as dist

from engine.distributed import process_group as pg


def test_a_teardown_that_never_returns_is_given_up_on(monkeypatch):
    """A stand-in for NCCL's teardown blocked on a vanished peer (which needs two GPUs to provoke)."""
    release, returned = threading.Event(), threading.Event()

    def blocked_teardown() -> None:
        release.wait()
        returned.set()

    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    monkeypatch.setattr(dist, "destroy_process_group", blocked_teardown)
    assert pg.destroy_process_group(wait_s=0.2) is False
    assert not returned.is_set()  # it gave up on a teardown that is still blocked
    release.set()


def test_a_prompt_teardown_reports_success(monkeypatch):
    calls = []
    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    monkeypatch.setattr(dist, "destroy_process_group", lambda: calls.append(1))
    assert pg.destroy_process_group(wait_s=5) is True
    assert pg.destroy_process_group() is True
    assert calls == [1, 1]


def test_nothing_to_leave():
    assert not dist.is_initialized()
    assert pg.destroy_process_group(wait_s=1) is True
