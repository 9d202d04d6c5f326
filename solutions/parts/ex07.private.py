"""Exercise 7, computational graphs: gates by hand, a max gate and a fan-out, edu_dl.graph, order.

The gradient oracles are torch.autograd in float64; the topological order is judged by a validity
check (every node once, every edge forwards), since a graph has many valid orders.

Judged outside the sandbox: every value and shape against the oracle; the topological order's
edges against the case's own edge list (``result_check``), in linear time; for the static graph,
that the submitted source of the function calls placeholder, gradients and Session
(``source_check``), and for the two parts by hand, that it calls none of the oracle's tools
(G.gradients, .backward(), torch.autograd). The in-sandbox checks of the same things are
check()'s feedback only.

The private half: ``edu_dl.harness.ex07`` holds the public calls and checks.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from edu_dl.grading.authoring.hints import Arity, Mistake, NotScalar, Scalar, Shorter
from edu_dl.grading.authoring.source import names_check
from edu_dl.grading.authoring.spec import Part, tolerance
from edu_dl.harness.ex07 import (
    STATIC_NAMES,
    call_static,
    call_topo,
    length,
    topo_compare,
    topo_result_check,
)

Array = np.ndarray
Case = tuple[Any, ...]
F64 = tolerance(rtol=1e-9, atol=1e-12)
F32 = tolerance(rtol=1e-5, atol=1e-5)  # edu_dl.graph runs the float32 placeholders in float32


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


def _four_graph(x: Any, y: Any, z: Any, w: Any) -> Any:
    return ((x * y + z) * w).sum()


def _four_expected(x: Array, y: Array, z: Array, w: Array) -> tuple[Array, ...]:
    return tuple(_torch_grads(_four_graph, x, y, z, w)[1])


# --------------------------------------------------------------------------- max gate, fan-out


def _fan_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    """float64 (x, y, z) of one shape; no ties a == z (they have probability 0)."""
    return [tuple(rng.standard_normal(s) for _ in range(3)) for s in _shapes(rng, hidden)]


def _fan_cases_f32(rng: np.random.Generator, hidden: bool) -> list[Case]:
    """float32, as the graph's placeholders are."""
    return [tuple(a.astype(np.float32) for a in case) for case in _fan_cases(rng, hidden)]


def _fan_graph(x: Any, y: Any, z: Any) -> Any:
    import torch

    a = x * y
    return (torch.maximum(a, z) * a).sum()


def _fan_expected(x: Array, y: Array, z: Array) -> tuple[Any, ...]:
    f, grads = _torch_grads(_fan_graph, x, y, z)
    return (f, *grads)


def _fan_grads_without(args: Sequence[Array], branch: str) -> tuple[Array, ...]:
    """(grad_x, grad_y, grad_z) for ``args`` (x, y, z) with a typical mistake: one of a's two
    branches left out (``branch`` 'max' or 'product'), or the max gate's gradient sent to both
    inputs ('both')."""
    x, y, z = args
    a = x * y
    m = np.maximum(a, z)
    to_a = (a > z) if branch != "both" else np.ones_like(a)
    grad_a = (0 if branch == "product" else m) + (0 if branch == "max" else a * to_a)
    grad_z = a * (z > a) if branch != "both" else a
    return grad_a * y, grad_a * x, grad_z


FAN_OUT = ("a feeds two gates, max(a, z) and the product m * a: its gradient is the SUM of "
           "what both gates send back to it, not either one alone")
MAX_ROUTES = ("the max gate routes grad_m to the input that won: grad_a gets grad_m where a > z, "
              "grad_z where z > a (0 elsewhere); it does not send it to both")

ALL_THREE = ("those are the gradients of sum(max(a, z)): f multiplies the max by a again, "
             "f = reduce_sum(G.maximum(a, zs) * a) with a = xs * ys feeding both gates")
FORGOT_W = ("grad_a = grad_b * w: the multiply gate b * w scales the gradient by w before it "
            "reaches a = x * y (grad_x = w * y, grad_y = w * x)")

STATIC_SOURCE = names_check(required=[
    ((name,), f"the function never calls G.{name}: build the graph from placeholders, add the "
              "gradient nodes with G.gradients(f, [x, y, z]) and run them with a G.Session")
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


# The parts that ask for a backward pass by hand: the oracle's own tools give the answer.
BY_HAND_SOURCE = names_check(forbidden=[(
    ("backward", "grad", "gradients", "Session", "autograd", "torch"),
    "this part asks you to backpropagate by hand, gate by gate: walk back from grad_f = 1 with "
    "each gate's local gradient (do not call G.gradients, .backward() or torch.autograd)")])


# The students' framework's first piece: a library's sort (or the course's stand-in, which is one)
# answers it.
OWN_ORDER = names_check(forbidden=[(
    ("graphlib", "TopologicalSorter", "static_order", "networkx", "edu_dl"),
    "this part asks you to write the order yourself: count each node's inputs and add a node "
    "once none is left (do not call graphlib, networkx or the course's stand-in)")])


def _edges(args: Case) -> Array:
    return np.asarray(args[1]).reshape(-1, 2)


PARTS = [
    Part(
        id="ex07.four_input_backward", points=2, cases=_four_cases, expected=_four_expected,
        compare=F64, arg_names=("x", "y", "z", "w"), source_check=BY_HAND_SOURCE,
        output_names=("grad_x", "grad_y", "grad_z", "grad_w"),
        hints=(
            Mistake(lambda e, a: a[1], FORGOT_W, output=0, rtol=1e-5, atol=1e-5),
            Mistake(lambda e, a: a[0], FORGOT_W, output=1, rtol=1e-5, atol=1e-5),
            Mistake(lambda e, a: np.ones_like(a[2]),
                    "grad_z = grad_b: the add gate copies grad_b = w, which is not 1 here",
                    output=2, rtol=1e-5, atol=1e-5),
            Mistake(lambda e, a: a[0] * a[1],
                    "grad_w = b = x * y + z: the multiply gate sends w the OTHER input, all of b",
                    output=3, rtol=1e-5, atol=1e-5),
        ),
    ),
    Part(
        id="ex07.max_fan_out_numpy", points=2, cases=_fan_cases, expected=_fan_expected,
        compare=F64, arg_names=("x", "y", "z"), output_names=("f", "grad_x", "grad_y", "grad_z"),
        source_check=BY_HAND_SOURCE,
        hints=(
            NotScalar("f is a number: the sum of every entry of max(a, z) * a", output=0),
            Scalar("grad_z has z's shape: the max gate sends each entry its own gradient",
                   output=3),
            Mistake(lambda e, a: _fan_grads_without(a, "max")[0], FAN_OUT, output=1,
                    rtol=1e-9, atol=1e-12),
            Mistake(lambda e, a: _fan_grads_without(a, "product")[0], FAN_OUT, output=1,
                    rtol=1e-9, atol=1e-12),
            Mistake(lambda e, a: _fan_grads_without(a, "both")[2], MAX_ROUTES, output=3,
                    rtol=1e-9, atol=1e-12),
            Mistake(lambda e, a: _fan_grads_without(a, "both")[0], MAX_ROUTES, output=1,
                    rtol=1e-9, atol=1e-12),
        ),
    ),
    Part(
        id="ex07.static_graph", points=2, cases=_fan_cases_f32, expected=_fan_expected,
        compare=F32, call=call_static, source_check=STATIC_SOURCE,
        arg_names=("x", "y", "z"),
        output_names=("f", "grad_x", "grad_y", "grad_z"),
        hints=(
            Arity("return f and the three gradient arrays that sess.run gives: (f, grad_x, "
                  "grad_y, grad_z)", count=4),
            Mistake(lambda e, a: (a[0] * a[1] > a[2]) * a[1], ALL_THREE, output=1, rtol=1e-4,
                    atol=1e-4),
        ),
    ),
    Part(
        id="ex07.topological_order", points=2, cases=_topo_cases, expected=_topo_expected,
        compare=topo_compare, result_check=topo_result_check, call=call_topo,
        arg_names=("n_nodes", "edges"), source_check=OWN_ORDER,
        hints=(
            Mistake(lambda e, a: len(e) + len(_edges(a)),
                    "a node with several inputs (or an edge listed twice) is added only once: "
                    "count each node's remaining inputs and add it when that count reaches 0",
                    view=length, rtol=0.0, atol=0.0),
            Shorter("nodes with no edges at all belong in the order too: start from every node "
                    "with no inputs"),
        ),
    ),
]
