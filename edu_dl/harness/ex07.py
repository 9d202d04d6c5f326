"""Exercise 7, computational graphs: how its parts call and judge a student's function.

Public code (a release names it by ``edu_dl.harness.ex07:<name>``), and it computes no answer:
the static graph's call checks which edu_dl.graph names the function looks up; the topological
order is judged as a property (every node once, every edge of the case pointing forwards), never
against an order computed here. The gradient oracles and the hint replays stay in the course's
private part file.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from edu_dl.grading.authoring.spec import CheckFailure, Verdict, global_names

Case = tuple[Any, ...]

# --------------------------------------------------------------------------- the static graph

STATIC_NAMES = ("placeholder", "gradients", "Session")


def call_static(fn: Callable[..., Any], args: Case) -> Any:
    """Run fn, then check it asks edu_dl.graph for the gradients and runs them in a Session."""
    result = fn(*args)
    code = getattr(fn, "__code__", None)
    if code is not None:
        names = global_names(code)
        missing = [n for n in STATIC_NAMES if n not in names]
        if missing:
            raise CheckFailure(
                "the values are right, but the function never calls "
                + ", ".join(f"G.{n}" for n in missing)
                + ": build the graph from placeholders, add the gradient nodes with "
                  "G.gradients(f, [x, y, z]) and run them with a G.Session")
    return result


# --------------------------------------------------------------------------- topological order

SHOWN_IDS = 10


def edge_array(edges: Any) -> np.ndarray:
    """The case's edges as an (E, 2) integer array of (src, dst) rows."""
    return np.asarray(edges, dtype=np.int64).reshape(-1, 2)


def ids(values: np.ndarray) -> str:
    """'[3, 7]', or the first SHOWN_IDS and how many there are: messages stay short."""
    shown = ", ".join(str(int(v)) for v in values[:SHOWN_IDS])
    return f"[{shown}]" if len(values) <= SHOWN_IDS else f"[{shown}, ...] ({len(values)})"


def node_array(got: Any, wanted: str) -> tuple[np.ndarray | None, Verdict]:
    """``got`` as a 1-D int64 array of node ids, or None and the verdict that says why it is
    not one (``wanted``: what a message says was expected, "12 integer node ids")."""
    try:
        g = np.asarray(got)
    except Exception as exc:
        return None, Verdict(False, f"got a {type(got).__name__} that is not an array ({exc})")
    if g.ndim != 1 or (g.size and g.dtype.kind not in "iu"):
        return None, Verdict(False, f"expected a 1-D array of {wanted}, got shape {g.shape} "
                                    f"({g.dtype})")
    return g.astype(np.int64, copy=False), Verdict(True)


def topo_compare(expected: Any, got: Any) -> Verdict:
    """Valid when got lists every node 0..n-1 once (linear: one bincount, no search); only the
    length of ``expected`` is used."""
    n = len(np.asarray(expected))
    g, verdict = node_array(got, f"{n} integer node ids")
    if g is None:
        return verdict
    known = (g >= 0) & (g < n)
    counts = np.bincount(g[known], minlength=n)
    if len(g) == n and bool(known.all()) and bool((counts == 1).all()):
        return Verdict(True)
    missing = np.flatnonzero(counts == 0)
    twice = np.flatnonzero(counts > 1)
    extra = np.unique(g[~known][:SHOWN_IDS * 100])
    return Verdict(False, f"expected every node 0..{n - 1} exactly once, got {len(g)} ids"
                          f" (missing {ids(missing)}, repeated {ids(twice)}, unknown "
                          f"{ids(extra)})")


def backward_edge(got: Any, args: Case) -> tuple[int, int] | None:
    """The first edge (src, dst) whose target comes before its source in got, or None.

    got lists every node 0..n-1 once (compare checked it): one position lookup per edge.
    """
    order = np.asarray(got, dtype=np.int64).reshape(-1)
    edges = edge_array(args[1])
    position = np.empty(len(order), dtype=np.int64)
    position[order] = np.arange(len(order))
    bad = np.flatnonzero(position[edges[:, 0]] > position[edges[:, 1]])
    if not len(bad):
        return None
    src, dst = edges[bad[0]]
    return int(src), int(dst)


REVERSED = (" (your order is exactly reversed: that is the order of the BACKWARD pass; a "
            "topological order puts every input before the nodes that use it)")


def topo_result_check(got: Any, args: Case) -> Verdict:
    """The grader's edge check: every edge of the case points forwards in the raw result."""
    bad = backward_edge(got, args)
    if bad is None:
        return Verdict(True)
    src, dst = bad
    hint = REVERSED if backward_edge(np.asarray(got)[::-1], args) is None else ""
    return Verdict(False, f"edge {src} -> {dst}: node {dst} comes before its input {src}{hint}")


def call_topo(fn: Callable[..., Any], args: Case) -> Any:
    """Run fn; if its answer lists every node once, check each edge points forwards."""
    got = fn(*args)
    n = int(args[0])
    a = np.asarray(got)
    if topo_compare(np.arange(n), a).ok:
        bad = backward_edge(a, args)
        if bad is not None:
            src, dst = bad
            order = a.tolist()
            hint = REVERSED if backward_edge(order[::-1], args) is None else ""
            raise CheckFailure(f"edge {src} -> {dst}: node {dst} comes before its input {src} "
                               f"in your order {order}{hint}")
    return got


def length(value: Any) -> int:
    """How many ids a result lists (a Mistake's view: hints on the length of an order)."""
    return len(np.asarray(value))
