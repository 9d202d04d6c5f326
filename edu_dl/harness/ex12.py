"""Exercise 12, static vs dynamic: how its parts call and judge a student's function.

Public code (a release names it by ``edu_dl.harness.ex12:<name>``), and it computes no answer:
the static RNN's call counts the edu_dl.graph Session runs; the plan's call and compare read the
result as a set of node ids; the RNN's loss is picked out of a result for a hint; two generic
rules look at which outputs are right. The oracles (``torch.autograd``, the transitive closure,
``edu_dl.caffe``) and the mistake replays stay in the course's private part file.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from edu_dl.grading.authoring.hints import Rule, close
from edu_dl.grading.authoring.spec import CheckFailure, Verdict
from edu_dl.grading.protocol import as_array

Case = tuple[Any, ...]

# --------------------------------------------------------------------------- the RNN


def call_static(fn: Callable[..., Any], args: Case) -> Any:
    """Run fn, then check that an edu_dl.graph Session computed the result."""
    from edu_dl import graph

    runs = 0
    original = graph.Session.run

    def counting_run(self: Any, *a: Any, **kw: Any) -> Any:
        nonlocal runs
        runs += 1
        return original(self, *a, **kw)

    graph.Session.run = counting_run  # type: ignore[method-assign]
    try:
        result = fn(*args)
    finally:
        graph.Session.run = original  # type: ignore[method-assign]
    if runs == 0:
        raise CheckFailure("no edu_dl.graph Session ran: build the unrolled graph (placeholder, "
                           "Variable, eg.tanh, eg.matmul, eg.gradients) and fetch the values "
                           "with sess.run")
    return result


def loss_of(got: Any) -> Any:
    """The loss of a (loss, dW, dU) result; None for anything else (a Mistake's view)."""
    return got[0] if isinstance(got, tuple | list) and len(got) == 3 else None


def _as_many_outputs(expected: Any, got: Any) -> bool:
    return isinstance(got, tuple | list) and isinstance(expected, tuple) and \
        len(got) == len(expected)


@dataclass(frozen=True)
class OutputRight(Rule):
    """A tuple of as many outputs as expected whose output ``right`` is right (and, the rest
    being wrong, the mistake is elsewhere)."""

    right: int = 0
    rtol: float = 1e-6
    atol: float = 1e-8

    def judge(self, expected: Any, got: Any, args: tuple[Any, ...]) -> bool:
        return _as_many_outputs(expected, got) and close(
            got[self.right], expected[self.right], self.rtol, self.atol)


@dataclass(frozen=True)
class RightButTransposed(OutputRight):
    """Output ``right`` is right and one of the outputs ``transposed`` holds its expected value
    transposed."""

    transposed: tuple[int, ...] = ()

    def judge(self, expected: Any, got: Any, args: tuple[Any, ...]) -> bool:
        return super().judge(expected, got, args) and any(
            close(got[j], as_array(expected[j]).T, self.rtol, self.atol)
            for j in self.transposed)


# --------------------------------------------------------------------------- the plan


def node_ids(values: Any) -> np.ndarray | None:
    """Distinct node ids, sorted, from an array of integers; None when they are not integers."""
    a = np.asarray(values).ravel()
    if a.size and a.dtype.kind not in "iu":
        return None
    return np.unique(a.astype(np.int64))


def call_plan(fn: Callable[..., Any], args: Case) -> np.ndarray:
    """The student's nodes as a sorted array of distinct ints: graded as a set."""
    result = fn(*args)
    try:
        nodes = node_ids(list(result))
    except (TypeError, ValueError) as exc:
        raise CheckFailure(f"return node indices (a list, set or array of ints), got "
                           f"{type(result).__name__} ({exc})") from None
    if nodes is None:
        raise CheckFailure(f"return node indices as integers, got {type(result).__name__} of "
                           f"{np.asarray(list(result)).dtype} values")
    return nodes


def compare_sets(expected: Any, got: Any) -> Verdict:
    """The same set of integer node ids (np.unique: n log n on a result the size cap bounds)."""
    e = node_ids(expected)
    try:
        g = node_ids(got)
    except (TypeError, ValueError):
        g = None
    if e is None or g is None:
        return Verdict(False, f"expected node indices (integers), got {type(got).__name__}")
    if np.array_equal(e, g):
        return Verdict(True)
    missing, extra = np.setdiff1d(e, g).tolist(), np.setdiff1d(g, e)[:20].tolist()
    parts = []
    if missing:
        parts.append(f"missing nodes {missing}")
    if extra:
        parts.append(f"nodes not needed {extra}")
    shown = g.tolist() if len(g) <= 40 else [*g[:40].tolist(), "..."]
    return Verdict(False, f"expected nodes {e.tolist()}, got {shown}: " + "; ".join(parts))


def id_set(values: Any) -> np.ndarray:
    """The distinct ids of a result, sorted, as int64 (a Mistake's view: a plan is a set)."""
    return np.unique(np.array([int(i) for i in np.asarray(values).ravel()], dtype=np.int64))
