"""Exercise 17 (GPU practice): how its parts call a student's function.

Public code, shipped with the package: the call adapters (layer sizes as a list of ints) and a
rule for hints on an integer result (an off-by-one). Nothing here computes an answer: the oracles
(edu_dl.gpu.memory on the course's MLPs), the hidden cases and the mistake replays stay in the
private part file.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from edu_dl.grading.authoring.hints import Rule

Case = tuple[Any, ...]


def sizes_list(value: Any) -> list[int]:
    """Layer sizes (an array in a case) as the list of ints a student's function gets."""
    return [int(v) for v in np.asarray(value).ravel()]


def as_int(value: Any) -> int:
    """One number of a result as a Python int (truncated): what a hint on bytes compares."""
    return int(np.asarray(value).item())


# --------------------------------------------------------------------------- 1, 2. the budget


def call_budget(fn: Callable[..., Any], args: Case) -> Any:
    """memory_budget(sizes, batch_size, itemsize, optimizer) with plain Python values."""
    sizes, batch_size, itemsize, optimizer = args
    return fn(sizes_list(sizes), int(batch_size), int(itemsize), str(optimizer))


def call_max_batch(fn: Callable[..., Any], args: Case) -> Any:
    """max_batch(sizes, itemsize, optimizer, budget_bytes) with plain Python values."""
    sizes, itemsize, optimizer, budget_bytes = args
    return fn(sizes_list(sizes), int(itemsize), str(optimizer), int(budget_bytes))


@dataclass(frozen=True)
class IntegerOffBy(Rule):
    """An integer result ``delta`` away from the expected one (an off-by-one)."""

    delta: int = 1

    def test(self, expected: Any, got: Any, args: Case) -> bool:
        return as_int(got) == expected + self.delta
