"""Exercise 4, computational graphs: gates by hand, the lecture's example, edu_dl.graph, and order.

The gradient oracles are torch.autograd in float64; the topological order is judged by a validity
check (every node once, every edge forwards), since a graph has many valid orders.

Judged outside the sandbox: every value and shape against the oracle; the topological order's
edges against the case's own edge list (``result_check``), in linear time; for the static graph,
that the submitted source of the function calls placeholder, gradients and Session
(``source_check``). The in-sandbox checks of the same things are check()'s feedback only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from edu_dl.grading.source import names_check
from edu_dl.grading.spec import CheckFailure, Part, Verdict, global_names, tolerance

Array = np.ndarray
Case = tuple[Any, ...]
F64 = tolerance(rtol=1e-9, atol=1e-12)
F32 = tolerance(rtol=1e-5, atol=1e-5)  # edu_dl.graph runs the float32 placeholders in float32


def _close(a: Any, b: Any) -> bool:
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return a.shape == b.shape and bool(np.allclose(a, b, rtol=1e-5, atol=1e-5))


def _shapes(rng: np.random.Generator, hidden: bool) -> list[tuple[int, ...]]:
    if not hidden:
        return [(3, 4), (2, 2), (1, 5)]
    return [(1, 1), *(tuple(int(d) for d in rng.integers(1, 7, size=2)) for _ in range(3))]


def _torch_grads(f: Callable[..., Any], *arrays: Array) -> tuple[float, list[Array]]:
    """f's value and its gradients with respect to every input, by torch.autograd in float64."""
    import torch

    ts = [torch.tensor(np.asarray(a, dtype=np.float64), requires_grad=True) for a in arrays]
    out = f(*ts)
    out.backward()
    return float(out.item()), [t.grad.numpy() for t in ts if t.grad is not None]


# --------------------------------------------------------------------------- f = sum((x*y + z) * w)


def _four_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    return [tuple(rng.standard_normal(s) for _ in range(4)) for s in _shapes(rng, hidden)]


def _four_cases_f32(rng: np.random.Generator, hidden: bool) -> list[Case]:
    """float32, as the graph's placeholders are: the lecture's dtype."""
    return [tuple(a.astype(np.float32) for a in case) for case in _four_cases(rng, hidden)]


def _four_graph(x: Any, y: Any, z: Any, w: Any) -> Any:
    return ((x * y + z) * w).sum()


def _four_expected(x: Array, y: Array, z: Array, w: Array) -> tuple[Array, ...]:
    return tuple(_torch_grads(_four_graph, x, y, z, w)[1])


# --------------------------------------------------------------------------- the lecture's example


def _three_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    return [tuple(rng.standard_normal(s).astype(np.float32) for _ in range(3))
            for s in _shapes(rng, hidden)]


def _three_graph(x: Any, y: Any, z: Any) -> Any:
    return (x * y + z).sum()


def _three_expected(x: Array, y: Array, z: Array) -> tuple[Any, ...]:
    c, grads = _torch_grads(_three_graph, x, y, z)
    return (c, *grads)


def _call_static(fn: Callable[..., Any], args: Case) -> Any:
    """Run fn, then check it asks edu_dl.graph for the gradients and runs them in a Session."""
    result = fn(*args)
    code = getattr(fn, "__code__", None)
    if code is not None:
        names = global_names(code)
        missing = [n for n in ("placeholder", "gradients", "Session") if n not in names]
        if missing:
            raise CheckFailure(
                "the values are right, but the function never calls "
                + ", ".join(f"G.{n}" for n in missing)
                + ": build the graph from placeholders, add the gradient nodes with "
                  "G.gradients(f, [x, y, z, w]) and run them with a G.Session")
    return result


STATIC_NAMES = ("placeholder", "gradients", "Session")
STATIC_SOURCE = names_check(required=[
    ((name,), f"the function never calls G.{name}: build the graph from placeholders, add the "
              "gradient nodes with G.gradients(f, [x, y, z, w]) and run them with a G.Session")
    for name in STATIC_NAMES])


# --------------------------------------------------------------------------- topological order


def _dag(rng: np.random.Generator, n: int, n_edges: int) -> Array:
    """Random edges (src, dst) of a DAG on nodes 0..n-1, labels shuffled, duplicates allowed."""
    if n < 2 or n_edges == 0:
        return np.zeros((0, 2), dtype=np.int64)
    rank = rng.permutation(n)  # node rank[i] is the i-th in some hidden order
    edges = []
    for _ in range(n_edges):
        i, j = sorted(int(v) for v in rng.choice(n, size=2, replace=False))
        edges.append((rank[i], rank[j]))
    edges.append(edges[0])  # an input used twice (a = x * x): the same edge twice
    return np.array(edges, dtype=np.int64)


LECTURE_EDGES = np.array([[0, 3], [1, 3], [3, 4], [2, 4], [4, 5]], dtype=np.int64)  # x y z a b c


def _topo_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    if not hidden:
        return [
            (6, LECTURE_EDGES),  # the lecture's graph: x, y, z, a, b, c
            (6, np.array([[5, 4], [4, 3], [3, 2], [2, 1], [1, 0]], dtype=np.int64)),  # a chain
            (4, np.array([[3, 0], [3, 1], [0, 2], [1, 2]], dtype=np.int64)),  # a diamond
        ]
    big, small = int(rng.integers(8, 15)), int(rng.integers(3, 8))
    return [(1, np.zeros((0, 2), dtype=np.int64)), (5, np.zeros((0, 2), dtype=np.int64)),
            (big, _dag(rng, big, int(rng.integers(8, 25)))),
            (small, _dag(rng, small, int(rng.integers(2, 8))))]


def _topo_expected(n: int, edges: Array) -> Array:
    from graphlib import TopologicalSorter

    sorter: TopologicalSorter[int] = TopologicalSorter({k: set() for k in range(n)})
    for src, dst in np.asarray(edges).reshape(-1, 2):
        sorter.add(int(dst), int(src))
    return np.array(list(sorter.static_order()), dtype=np.int64)


def _edge_array(edges: Any) -> Array:
    return np.asarray(edges, dtype=np.int64).reshape(-1, 2)


SHOWN_IDS = 10


def _ids(values: Array) -> str:
    """'[3, 7]', or the first SHOWN_IDS and how many there are: messages stay short."""
    shown = ", ".join(str(int(v)) for v in values[:SHOWN_IDS])
    return f"[{shown}]" if len(values) <= SHOWN_IDS else f"[{shown}, ...] ({len(values)})"


def _topo_compare(expected: Any, got: Any) -> Verdict:
    """Valid when got lists every node 0..n-1 once (linear: one bincount, no search)."""
    e = np.asarray(expected)
    try:
        g = np.asarray(got)
    except Exception as exc:
        return Verdict(False, f"got a {type(got).__name__} that is not an array ({exc})")
    if g.ndim != 1 or (g.size and g.dtype.kind not in "iu"):
        return Verdict(False, f"expected a 1-D array of {len(e)} integer node ids, got shape "
                              f"{g.shape} ({g.dtype})")
    n = len(e)
    g = g.astype(np.int64, copy=False)
    known = (g >= 0) & (g < n)
    counts = np.bincount(g[known], minlength=n)
    if len(g) == n and bool(known.all()) and bool((counts == 1).all()):
        return Verdict(True)
    missing = np.flatnonzero(counts == 0)
    twice = np.flatnonzero(counts > 1)
    extra = np.unique(g[~known][:SHOWN_IDS * 100])
    return Verdict(False, f"expected every node 0..{n - 1} exactly once, got {len(g)} ids"
                          f" (missing {_ids(missing)}, repeated {_ids(twice)}, unknown "
                          f"{_ids(extra)})")


def _topo_edges_ok(got: Any, args: Case) -> tuple[int, int] | None:
    """The first edge (src, dst) whose target comes before its source in got, or None.

    got lists every node 0..n-1 once (compare checked it): one position lookup per edge.
    """
    order = np.asarray(got, dtype=np.int64).reshape(-1)
    edges = _edge_array(args[1])
    position = np.empty(len(order), dtype=np.int64)
    position[order] = np.arange(len(order))
    bad = np.flatnonzero(position[edges[:, 0]] > position[edges[:, 1]])
    if not len(bad):
        return None
    src, dst = edges[bad[0]]
    return int(src), int(dst)


def _topo_result_check(got: Any, args: Case) -> Verdict:
    """The grader's edge check: every edge of the case points forwards in the raw result."""
    bad = _topo_edges_ok(got, args)
    if bad is None:
        return Verdict(True)
    src, dst = bad
    reversed_ok = _topo_edges_ok(np.asarray(got)[::-1], args) is None
    hint = (" (your order is exactly reversed: that is the order of the BACKWARD pass; a "
            "topological order puts every input before the nodes that use it)"
            if reversed_ok else "")
    return Verdict(False, f"edge {src} -> {dst}: node {dst} comes before its input {src}{hint}")


def _call_topo(fn: Callable[..., Any], args: Case) -> Any:
    """Run fn; if its answer lists every node once, check each edge points forwards."""
    got = fn(*args)
    n = int(args[0])
    a = np.asarray(got)
    if _topo_compare(np.arange(n), a).ok:
        bad = _topo_edges_ok(a, args)
        if bad is not None:
            src, dst = bad
            order = a.tolist()
            hint = ""
            if _topo_edges_ok(order[::-1], args) is None:
                hint = (" (your order is exactly reversed: that is the order of the BACKWARD "
                        "pass; a topological order puts every input before the nodes that use "
                        "it)")
            raise CheckFailure(f"edge {src} -> {dst}: node {dst} comes before its input {src} "
                               f"in your order {order}{hint}")
    return got


PARTS = [
    Part(
        id="ex04.four_input_backward", points=2, cases=_four_cases, expected=_four_expected,
        compare=F64, arg_names=("x", "y", "z", "w"),
        output_names=("grad_x", "grad_y", "grad_z", "grad_w"),
        hints=(
            (lambda e, g, a: _close(g[0], a[1]) or _close(g[1], a[0]),
             "grad_a = grad_b * w: the multiply gate b * w scales the gradient by w before it "
             "reaches a = x * y (grad_x = w * y, grad_y = w * x)"),
            (lambda e, g, a: _close(g[2], np.ones_like(a[2])),
             "grad_z = grad_b: the add gate copies grad_b = w, which is not 1 here"),
            (lambda e, g, a: _close(g[3], a[0] * a[1]),
             "grad_w = b = x * y + z: the multiply gate sends w the OTHER input, all of b"),
        ),
    ),
    Part(
        id="ex04.three_input_numpy", points=1, cases=_three_cases, expected=_three_expected,
        compare=F32, arg_names=("x", "y", "z"), output_names=("c", "grad_x", "grad_y", "grad_z"),
        hints=(
            (lambda e, g, a: np.ndim(g[3]) == 0,
             "grad_z has z's shape: every entry of b gets grad_c = 1 (np.ones_like)"),
            (lambda e, g, a: _close(g[1], a[0]) or _close(g[2], a[1]),
             "the multiply gate swaps its inputs: grad_x = grad_a * y, grad_y = grad_a * x"),
            (lambda e, g, a: np.ndim(g[0]) != 0,
             "c is a number: the sum of every entry of b"),
        ),
    ),
    Part(
        id="ex04.static_graph", points=2, cases=_four_cases_f32, expected=_four_expected,
        compare=F32, call=_call_static, source_check=STATIC_SOURCE,
        arg_names=("x", "y", "z", "w"),
        output_names=("grad_x", "grad_y", "grad_z", "grad_w"),
        hints=(
            (lambda e, g, a: not isinstance(g, tuple | list) or len(g) != 4,
             "return the four arrays that sess.run gives for [grad_x, grad_y, grad_z, grad_w]"),
            (lambda e, g, a: _close(g[0], a[1]) or _close(g[3], a[0] * a[1]),
             "build f = reduce_sum((x * y + z) * w): all four placeholders take part"),
        ),
    ),
    Part(
        id="ex04.topological_order", points=2, cases=_topo_cases, expected=_topo_expected,
        compare=_topo_compare, result_check=_topo_result_check, call=_call_topo,
        arg_names=("n_nodes", "edges"),
        hints=(
            (lambda e, g, a: len(np.asarray(g)) == len(e) + len(np.asarray(a[1]).reshape(-1, 2)),
             "a node with several inputs (or an edge listed twice) is added only once: count "
             "each node's remaining inputs and add it when that count reaches 0"),
            (lambda e, g, a: len(np.asarray(g)) < len(e),
             "nodes with no edges at all belong in the order too: start from every node with "
             "no inputs"),
        ),
    ),
]
