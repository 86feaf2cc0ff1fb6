"""A value derived from a step's input tensors, made once per step though every layer asks for it.

Every layer of a step passes the same metadata tensors (positions, slot mapping, block tables), so
what a torch path derives from them (a decode step's gather plan, the rotary angles at its
positions, the slots as int64) need not be rebuilt per layer: on a CPU each rebuild is a handful of
small ops, and a small op costs microseconds of dispatch. Tensors are matched by identity (the memo
keeps them alive, so an id is never reused) and by version counter (a static buffer rewritten in
place is another step); other arguments by equality.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class StepMemo(Generic[T]):
    """``memo(*tensors, *others)`` returns ``make(*tensors, *others)``, computed again only when a
    tensor is another object or was written since, or another argument differs. One entry: the
    last step's."""

    def __init__(self, make: Callable[..., T], tensors: int) -> None:
        self._make = make
        self._tensors = tensors  # how many leading arguments are tensors
        self._key: tuple | None = None
        self._value: T | None = None

    def __call__(self, *args) -> T:
        tensors, others = args[: self._tensors], args[self._tensors :]
        key = self._key
        if (
            key is not None
            and all(a is b for a, b in zip(key[0], tensors, strict=True))
            and key[1] == tuple(t._version for t in tensors)
            and key[2] == others
        ):
            return self._value
        value = self._make(*args)
        self._key = (tensors, tuple(t._version for t in tensors), others)
        self._value = value
        return value

    def clear(self) -> None:
        self._key = self._value = None
