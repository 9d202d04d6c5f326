"""Exercise 7's parts: the solutions notebook passes every case; typical mistakes get their hint."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import nbformat
import numpy as np
import pytest
from fixtures.exercise_helpers import (
    checked,
    course_module,
    run_check,
    solution_namespace,
)

from edu_dl.grading import check
from edu_dl.grading.authoring import spec
from edu_dl.grading.trust import source as trusted_source

pytestmark = pytest.mark.usefixtures("in_solutions")  # check() finds ./parts there

ex07 = course_module("ex07")

SOLUTIONS = solution_namespace("07_computational_graphs.ipynb")


run = run_check


def test_four_inputs_forgetting_w(capsys: pytest.CaptureFixture[str]) -> None:
    ok, out = run(capsys, "ex07.four_input_backward",
                  lambda x, y, z, w: (y, x, np.ones_like(z), x * y + z))
    assert not ok
    assert "case 1 of 3 (x (3, 4), y (3, 4), z (3, 4), w (3, 4)): output 0 (grad_x)" in out
    assert "[0, 0]: expected" in out
    assert "hint: grad_a = grad_b * w" in out


def test_four_inputs_grad_w_without_z(capsys: pytest.CaptureFixture[str]) -> None:
    ok, out = run(capsys, "ex07.four_input_backward",
                  lambda x, y, z, w: (w * y, w * x, w, x * y))
    assert not ok
    assert "output 3 (grad_w)" in out and "hint: grad_w = b = x * y + z" in out


def test_max_fan_out_with_a_scalar_grad_z(capsys: pytest.CaptureFixture[str]) -> None:
    ok, out = run(capsys, "ex07.max_fan_out_numpy",
                  lambda x, y, z: (np.sum(np.maximum(x * y, z) * x * y), y, x, 1.0))
    assert not ok
    assert "output 3 (grad_z): expected shape (3, 4), got shape ()" in out
    assert "hint: grad_z has z's shape" in out


def fan_out(x, y, z, mistake=None):
    """The max gate and the fan-out by hand, written independently of the solution, with one
    typical mistake switched on."""
    a = x * y
    m = np.maximum(a, z)
    from_max = np.where(a > z, a, 0.0) if mistake != "both" else a
    grad_a = {"no_sum": from_max, "product_only": m}.get(mistake, m + from_max)
    grad_z = np.where(z > a, a, 0.0) if mistake != "both" else a
    return np.sum(m * a), grad_a * y, grad_a * x, grad_z


@pytest.mark.parametrize(("mistake", "hint"), [
    (None, None),
    ("no_sum", "hint: a feeds two gates"),
    ("product_only", "hint: a feeds two gates"),
    ("both", "hint: the max gate routes grad_m to the input that won"),
])
def test_max_fan_out_mistakes_get_their_hint(capsys: pytest.CaptureFixture[str], mistake: Any,
                                             hint: Any) -> None:
    for hidden in (False, True):
        ok, out = run(capsys, "ex07.max_fan_out_numpy",
                      lambda x, y, z: fan_out(x, y, z, mistake), hidden=hidden)
        if hint is None:  # an independent right answer passes and no hint speaks
            assert ok and "hint" not in out, out
            continue
        assert not ok and hint in out, out


def test_static_graph_computed_in_numpy_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    ok, out = run(capsys, "ex07.static_graph", SOLUTIONS["max_fan_out_numpy"])
    assert not ok
    assert "the values are right, but the function never calls G.placeholder, G.gradients, " \
           "G.Session" in out


def test_topological_order_reversed(capsys: pytest.CaptureFixture[str]) -> None:
    ok, out = run(capsys, "ex07.topological_order",
                  lambda n, e: SOLUTIONS["topological_order"](n, e)[::-1])
    assert not ok
    assert "case 1 of 3 (n_nodes=6, edges (5, 2)) failed: edge" in out
    assert "your order is exactly reversed: that is the order of the BACKWARD pass" in out


def test_topological_order_missing_lonely_nodes(capsys: pytest.CaptureFixture[str]) -> None:
    def from_edges_only(n, edges):
        order = SOLUTIONS["topological_order"](n, edges)
        used = set(np.asarray(edges).reshape(-1).tolist())
        return np.array([k for k in order if k in used], dtype=np.int64)

    assert check("ex07.topological_order", from_edges_only)  # every visible node has an edge
    capsys.readouterr()
    ok, out = checked("ex07.topological_order", from_edges_only, hidden=True)
    assert not ok
    assert "expected every node 0..0 exactly once, got 0 ids (missing [0]" in out
    assert "hint: nodes with no edges at all belong in the order too" in out


def test_topological_order_any_valid_order_passes() -> None:
    from graphlib import TopologicalSorter

    edges = ex07.LECTURE_EDGES
    part = ex07.PARTS[3]
    for order in ([0, 1, 2, 3, 4, 5], [2, 1, 0, 3, 4, 5], [1, 0, 3, 2, 4, 5]):
        got = part.call(lambda n, e, order=order: np.array(order), (6, edges))
        assert part.compare(part.expected(6, edges), got).ok
    assert list(TopologicalSorter({1: {0}}).static_order()) == [0, 1]
    with pytest.raises(spec.CheckFailure, match="edge 3 -> 4: node 4 comes before"):
        part.call(lambda n, e: np.array([0, 1, 2, 4, 3, 5]), (6, edges))


BY_HAND = "this part asks you to backpropagate by hand, gate by gate"
G = SOLUTIONS["G"]  # edu_dl.graph, as the notebook imports it


def four_by_autograd(x, y, z, w):
    import torch

    ts = [torch.tensor(v, requires_grad=True) for v in (x, y, z, w)]
    ((ts[0] * ts[1] + ts[2]) * ts[3]).sum().backward()
    return tuple(t.grad.numpy() for t in ts)


def fan_by_graph(x, y, z):
    graph = G.Graph()
    with graph.as_default():
        xs, ys, zs = (G.placeholder(G.float64, shape=v.shape) for v in (x, y, z))
        a = xs * ys
        f = G.reduce_sum(G.maximum(a, zs) * a)
        grads = G.gradients(f, [xs, ys, zs])
    with G.Session(graph) as sess:
        return tuple(sess.run([f, *grads], feed_dict={xs: x, ys: y, zs: z}))


@pytest.mark.parametrize(("part_id", "fn"), [("ex07.four_input_backward", four_by_autograd),
                                             ("ex07.max_fan_out_numpy", fan_by_graph)])
def test_the_parts_by_hand_refuse_the_oracles_tools(capsys: pytest.CaptureFixture[str],
                                                    part_id: str, fn: Any) -> None:
    """The values of torch.autograd or G.gradients are right, but these parts ask for them by
    hand: check() and the grader both say so; the solution's own source passes."""
    ok, out = run(capsys, part_id, fn)
    assert not ok
    assert out.startswith(f"✗ {part_id}: the values are right, but {BY_HAND}")
    part = next(p for p in ex07.PARTS if p.id == part_id)
    assert part.source_check is not None
    nb = nbformat.read(Path(__file__).resolve().parents[2] / "solutions"
                       / "07_computational_graphs.ipynb", as_version=4)
    found = trusted_source.find_source(nb, part_id)
    assert found is not None and part.source_check(found).ok
