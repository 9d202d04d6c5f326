"""Exercise 16 (many devices): how its parts call a student's function, and its generic hints.

Public code, shipped with the package: the call adapters of ``ex16.all_reduce_mean`` (the workers'
gradients as a Python list) and ``ex16.tensor_parallel_backward`` (each rank's weight shards as a
list, the per-rank results stacked), a view for hints on a byte count, and rules that judge a result
against the expected one (a shape with one axis less, the right values beside a wrong count).
Nothing here computes an answer: the oracles, the hidden cases and the mistake replays (a ring
all-reduce simulator among them) stay in the private part file.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from edu_dl.grading.authoring import guard
from edu_dl.grading.authoring.hints import Rule, close, output_of

Case = tuple[Any, ...]


def call_with_list(fn: Callable[..., Any], args: Case) -> Any:
    """The student's function gets a Python list of the k workers' arrays (copies, watched by
    the guard: a write into one fails the case as a write into ``grads``)."""
    grads = args[0]
    return np.asarray(fn(guard.watch(0, [np.array(g) for g in grads])))


def as_int(value: Any) -> int:
    """A count as a Python int (a float is truncated): what a byte-count hint compares."""
    return int(value)


def call_with_shards(fn: Callable[..., Any], args: Case) -> Any:
    """The student's function gets each rank's shards as a list; each per-rank output (a list
    of k arrays, or one array with a leading rank axis) comes back as one stacked array."""
    x, w1_shards, w2_shards, dy = args
    result = fn(guard.watch(0, np.array(x)), guard.watch(1, [np.array(w) for w in w1_shards]),
                guard.watch(2, [np.array(w) for w in w2_shards]), guard.watch(3, np.array(dy)))
    if not isinstance(result, tuple | list) or len(result) != 3:
        return result  # the comparison reports the wrong kind of result
    return tuple(np.asarray(per_rank, dtype=np.float64) for per_rank in result)


@dataclass(frozen=True)
class FirstAxisDropped(Rule):
    """The result's shape is the expected one without its first axis (one array where one per
    worker is expected)."""

    def test(self, expected: Any, got: Any, args: Case) -> bool:
        return bool(np.shape(got) == np.shape(expected)[1:])


@dataclass(frozen=True)
class WrongWhereRight(Rule):
    """Output ``output`` is wrong while output ``right`` is right (within rtol, atol): a hint
    about ``output`` (the one a report names) that says the other one is fine."""

    right: int = 0
    rtol: float = 1e-9
    atol: float = 1e-12

    def judge(self, expected: Any, got: Any, args: Case) -> bool:
        return close(np.asarray(output_of(got, self.right), dtype=np.float64),
                     output_of(expected, self.right), self.rtol, self.atol)


@dataclass(frozen=True)
class ValuesRightCountsScaled(Rule):
    """Output ``values`` is right (within rtol, atol) and output ``counts`` sums to exactly
    ``factor`` times the expected sum (each transfer counted on both sides, say)."""

    values: int = 0
    counts: int = 1
    factor: float = 2.0
    rtol: float = 1e-9
    atol: float = 1e-12

    def judge(self, expected: Any, got: Any, args: Case) -> bool:
        right = close(np.asarray(output_of(got, self.values), dtype=np.float64),
                      output_of(expected, self.values), self.rtol, self.atol)
        return right and bool(np.sum(output_of(got, self.counts))
                              == self.factor * np.sum(output_of(expected, self.counts)))
