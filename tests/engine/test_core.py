"""The shared core: both engines agree on random programs, by construction and by test.

A random program (ops, broadcasting, float/int/bool dtypes, Python numbers, reused values, dead
branches) is written once against ``Operators``, so the same code runs eagerly on Tensors and
builds a graph on placeholders. Both must give exactly the same values, dtypes, gradients and
error types; the core loop (after apply's fast path or its general one) and the compiled plan
must call the same VJPs in the same order. PyTorch is the oracle for values and float64
gradients only (its promotion rules and error types differ from NumPy's).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import pytest
from fixtures.frameworks import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import edu_dl as ed
from edu_dl import graph as tf
from edu_dl import ops
from edu_dl.autograd import core

eager = sys.modules["edu_dl.autograd.tensor"]

DTYPES = [np.float64, np.float32, np.int64, np.bool_]
SHAPES = [(), (3,), (2, 3), (2, 1), (1, 3)]  # broadcast against each other, and fail to
BINARY: dict[str, Callable[[Any, Any], Any]] = {
    "add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
    "div": lambda a, b: a / b, "maximum": lambda a, b: a.maximum(b),
}
UNARY: dict[str, Callable[[Any], Any]] = {
    "exp": lambda a: a.exp(), "tanh": lambda a: a.tanh(), "neg": lambda a: -a,
    "square": lambda a: a**2, "sum0": lambda a: a.sum(axis=0), "mean": lambda a: a.mean(),
    "relu": lambda a: a.relu(),
}
SCALARS = [2, 0.5, True, -3]

Step = tuple[str, str, int, Any]  # (kind, op name, first operand, second operand or scalar)


@st.composite
def programs(draw: Any, float64_only: bool = False) -> tuple[list[Any], list[Step], list[int]]:
    """Leaves (arrays), steps over earlier values, and the values the output sums."""
    n_leaves = draw(st.integers(1, 3))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    leaves = []
    for _ in range(n_leaves):
        dtype = np.float64 if float64_only else draw(st.sampled_from(DTYPES))
        shape = draw(st.sampled_from(SHAPES))
        leaves.append((rng.standard_normal(shape) * 2).astype(dtype))
    steps: list[Step] = []
    for _ in range(draw(st.integers(1, 8))):
        n = n_leaves + len(steps)
        i = draw(st.integers(0, n - 1))
        kind = draw(st.sampled_from(["binary", "scalar", "unary"]))
        if kind == "binary":
            steps.append((kind, draw(st.sampled_from(sorted(BINARY))), i,
                          draw(st.integers(0, n - 1))))  # may equal i: x * x
        elif kind == "scalar":
            steps.append((kind, draw(st.sampled_from(["add", "mul", "sub", "rsub"])), i,
                          draw(st.sampled_from([0.5, -3] if float64_only else SCALARS))))
        else:
            steps.append((kind, draw(st.sampled_from(sorted(UNARY))), i, None))
    n = n_leaves + len(steps)
    # The output sums some values: the others are dead branches.
    picked = draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=3, unique=True))
    return leaves, steps, picked


def run_program(leaves: list[Any], steps: list[Step], picked: list[int]) -> Any:
    """The program on Tensors or Nodes: each step's value, then the summed output."""
    values = list(leaves)
    for kind, name, i, j in steps:
        a = values[i]
        if kind == "binary":
            values.append(BINARY[name](a, values[j]))
        elif kind == "scalar":
            values.append({"add": a + j, "mul": j * a, "sub": a - j, "rsub": j - a}[name])
        else:
            values.append(UNARY[name](a))
    out = values[picked[0]].sum()
    for k in picked[1:]:
        out = out + values[k].sum()
    return out


def floating(a: Any) -> bool:
    return np.dtype(a.dtype).kind == "f"


def run_eager(leaves: list[Any], steps: list[Step], picked: list[int]
              ) -> tuple[Any, list[Any]]:
    """(output, gradients of the float leaves; None where none flows), or the error raised."""
    tensors = [ed.tensor(a, requires_grad=floating(a)) for a in leaves]
    with np.errstate(all="ignore"):
        out = run_program(tensors, steps, picked)
        if out.requires_grad:
            out.backward()
    return out.data, [t.grad.data if t.grad is not None else None
                      for t, a in zip(tensors, leaves) if floating(a)]


def run_static(leaves: list[Any], steps: list[Step], picked: list[int]
               ) -> tuple[Any, list[Any]]:
    with tf.Graph().as_default():
        phs = [tf.placeholder(a.dtype, a.shape) for a in leaves]
        out = run_program(phs, steps, picked)
        xs = [p for p, a in zip(phs, leaves) if floating(a)]
        grads = tf.gradients(out, xs) if xs and floating(out) else [None] * len(xs)
        fetch = [out, *(g for g in grads if g is not None)]
        with tf.Session() as sess, np.errstate(all="ignore"):
            results = iter(sess.run(fetch, dict(zip(phs, leaves))))
        value = next(results)
        return value, [next(results) if g is not None else None for g in grads]


def outcome(run: Callable[..., Any], program: Any) -> Any:
    try:
        return run(*program)
    except Exception as exc:  # both engines must fail alike
        return type(exc)


def assert_same(a: Any, b: Any) -> None:
    a, b = np.asarray(a), np.asarray(b)
    assert a.dtype == b.dtype and a.shape == b.shape
    np.testing.assert_array_equal(a, b)


@settings(max_examples=150, deadline=None)
@given(programs())
def test_random_programs_give_the_same_values_dtypes_gradients_and_errors(program):
    got_eager, got_static = outcome(run_eager, program), outcome(run_static, program)
    if isinstance(got_eager, type) or isinstance(got_static, type):
        assert got_eager == got_static
        return
    (value_e, grads_e), (value_s, grads_s) = got_eager, got_static
    assert_same(value_e, value_s)
    assert len(grads_e) == len(grads_s)
    for ge, gs in zip(grads_e, grads_s):
        assert (ge is None) == (gs is None)
        if ge is not None:
            assert_same(ge, gs)


@settings(max_examples=60, deadline=None)
@given(programs(float64_only=True))
def test_random_float64_programs_match_torch(program):
    leaves, steps, picked = program
    got = outcome(run_eager, program)
    assume(not isinstance(got, type))  # NumPy's errors are not torch's
    value, grads = got
    ts = [torch.tensor(a, requires_grad=True) for a in leaves]
    out = run_program(ts, steps, picked)
    out.backward()
    np.testing.assert_allclose(value, out.detach().numpy(), rtol=1e-12, atol=1e-12)
    # Past an infinity the frameworks' formulae legitimately differ (torch's relu backward
    # selects where edu_dl multiplies by a mask: 0 * inf is nan): compare finite gradients.
    assume(all(t.grad is None or torch.isfinite(t.grad).all() for t in ts))
    for g, t in zip(grads, ts):
        expected = t.grad.numpy() if t.grad is not None else None
        if g is None:
            assert expected is None or not expected.any()
        else:
            np.testing.assert_allclose(g, expected, rtol=1e-10, atol=1e-12)


# --------------------------------------------------------------------------- same VJPs, same order


@contextmanager
def recording_vjps() -> Iterator[list[Any]]:
    """Every op's backward call, as the op object that made it, in call order."""
    calls: list[Any] = []
    originals = {cls: cls.__dict__["backward"] for cls in ops.Op.__subclasses__()
                 if "backward" in cls.__dict__}

    def recorder(original: Callable[..., Any]) -> Callable[..., Any]:
        def backward(self: ops.Op, grad: Any) -> Any:
            calls.append(self)
            return original(self, grad)
        return backward

    try:
        for cls, original in originals.items():
            cls.backward = recorder(original)  # type: ignore[method-assign]
        yield calls
    finally:
        for cls, original in originals.items():
            cls.backward = original  # type: ignore[method-assign]


def test_same_vjps_in_the_same_order_on_a_graph_with_reuse_and_a_dead_branch():
    check_same_vjps(([np.array([1.0, 2.0]), np.array([[0.5], [-1.0]])],
                     [("binary", "mul", 0, 0), ("binary", "add", 2, 1),
                      ("unary", "exp", 0, None), ("binary", "maximum", 3, 2),
                      ("unary", "tanh", 4, None)],
                     [5, 3]))


@settings(max_examples=80, deadline=None)
@given(programs(float64_only=True))
def test_same_vjps_in_the_same_order_on_random_graphs(program):
    check_same_vjps(program)


class _OtherArray(np.ndarray):
    """An array class other than ndarray: ``apply`` takes its general path (``_run``)."""


def check_same_vjps(program: Any) -> None:
    """The core loop (after ``apply``'s fast path and after its general one) and the compiled
    plan call the same VJPs in the same order, and give equal gradients."""
    leaves, steps, picked = program
    # The core loop, with apply's fast path (NumPy arrays) and its general one (another class).
    traces = []
    for array_class in (np.ndarray, _OtherArray):
        tensors = [eager.Tensor._wrap(a.copy().view(array_class), None, True) for a in leaves]
        out = run_program(tensors, steps, picked)
        assert type(out.data) in (array_class, np.float64)  # 0-d results become NumPy scalars
        order = core.toposort([out], eager.parents)
        position = {id(t._op): k for k, t in enumerate(order) if t._op is not None}
        with recording_vjps() as calls:
            out.backward()
        traces.append(([position[id(op)] for op in calls],
                       [t.grad.data if t.grad is not None else None for t in tensors],
                       [type(t._op).__name__ for t in order]))
    # The compiled plan, on the same program.
    with tf.Graph().as_default():
        phs = [tf.placeholder(a.dtype, a.shape) for a in leaves]
        out_node = run_program(phs, steps, picked)
        grads = tf.gradients(out_node, phs)
        fetch = [g for g in grads if g is not None]
        with tf.Session() as sess:
            plan = sess.plan_for(fetch, dict(zip(phs, leaves)))
            (sweep,) = plan.sweeps
            with recording_vjps() as calls:
                results = iter(sess.run(fetch, dict(zip(phs, leaves))))
        # Node positions in the eager order: the sweep's order is eager's, minus constants.
        static_order = core.toposort([out_node], tf.Node.parents.fget)
        op_of = {id(op): n for n, op in sweep.ops.items()}
        position = {n: k for k, n in enumerate(static_order)}
        static_calls = [position[op_of[id(op)]] for op in calls]
        static_grads = [next(results) if g is not None else None for g in grads]
    names = [n.op.__name__ if isinstance(n, tf.OpNode) else "NoneType"
             for n in static_order]
    (core_calls, core_grads, core_names), (fast_calls, fast_grads, fast_names) = traces
    assert core_names == fast_names == names
    assert core_calls == fast_calls == static_calls
    for c, f, s in zip(core_grads, fast_grads, static_grads):
        assert (c is None) == (f is None) == (s is None)
        if c is not None:
            assert_same(c, f)
            assert_same(c, s)


# --------------------------------------------------------------------------- the core's pieces


def test_toposort_is_iterative_and_puts_parents_first():
    n = 200_000  # far past the recursion limit
    chain = {i: (i - 1,) if i else () for i in range(n)}
    order = core.toposort([n - 1], chain.__getitem__)
    assert order == list(range(n))
    diamond = {"y": ("a", "b"), "a": ("x",), "b": ("x",), "x": ()}
    assert core.toposort(["y"], diamond.__getitem__) == ["x", "a", "b", "y"]


def test_backward_accumulates_and_add_can_reproduce_the_overwrite_bug():
    # y = x + x: x's gradient is the sum of its two contributions, unless add overwrites.
    parents = {"y": ("x", "x"), "x": ()}

    def vjp(node: str, grad: float) -> list[tuple[str, float]]:
        return [(p, grad) for p in parents[node]]

    order = core.toposort(["y"], parents.__getitem__)
    seen: dict[str, float] = {}
    core.backward(order, {"y": 1.0}, lambda n, g: seen.update({n: g}) or vjp(n, g))
    assert seen["x"] == 2.0
    core.backward(order, {"y": 1.0}, lambda n, g: seen.update({n: g}) or vjp(n, g),
                  add=lambda old, new: new)
    assert seen["x"] == 1.0


@pytest.mark.parametrize(("dtype", "scalar"), [
    (np.bool_, 5), (np.bool_, True), (np.bool_, 2.5), (np.int8, 3), (np.int32, 2.5),
    (np.float32, 2), (np.float32, 1e10), (np.float16, 0.1), (np.int64, True), (np.float32, 1j),
])
def test_operand_rule_is_numpy_2s_in_both_engines(dtype, scalar):
    """NEP 50: a Python number is weak (bool tensor + 5 is int64 [6 5]; it used to be bool in a
    Session); NumPy itself is the reference."""
    a = np.array([1, 0], dtype=dtype)
    expected = a + scalar
    eager_out = (ed.tensor(a) + scalar).data
    with tf.Graph().as_default():
        p = tf.placeholder(a.dtype, a.shape)
        node = p + scalar
        assert node.dtype == expected.dtype
        with tf.Session() as sess:
            static_out = sess.run(node, {p: a})
    assert_same(eager_out, expected)
    assert_same(static_out, expected)


def test_overflowing_python_integer_is_the_same_error_in_both_engines():
    a = np.array([1, 2], dtype=np.int8)
    with pytest.raises(OverflowError):
        a + 1000
    with pytest.raises(OverflowError):
        ed.tensor(a) + 1000
    with tf.Graph().as_default(), pytest.raises(OverflowError):
        tf.placeholder(np.int8, (2,)) + 1000


def test_errors_name_the_op_alike_in_both_engines():
    a, b = np.ones((2, 3)), np.ones(4)
    with pytest.raises(ValueError) as eager_error:
        ed.tensor(a).broadcast_to((4, 3))
    with tf.Graph().as_default(), pytest.raises(ValueError) as build_error:
        tf.placeholder(tf.float64, (2, 3)).broadcast_to((4, 3))
    assert str(eager_error.value).startswith("broadcast_to with input shapes (2, 3)")
    assert str(build_error.value) == str(eager_error.value)
    with tf.Graph().as_default():
        x = tf.placeholder(tf.float64, (None, 3))
        y = tf.broadcast_to(x, (4, 3))
        with tf.Session() as sess, pytest.raises(ValueError) as run_error:
            sess.run(y, {x: a})
    assert f"node '{y.name}' (broadcast_to with input shapes (2, 3))" in str(run_error.value)
    with pytest.raises(ValueError, match=r"^add with input shapes \(2, 3\), \(4,\)"):
        ed.tensor(a) + ed.tensor(b)


def test_ops_meet_an_engine_only_through_their_operands():
    with pytest.raises(TypeError, match="needs a Tensor or a graph node"):
        ops.exp(np.ones(2))
    assert not hasattr(ops, "EAGER_ENGINE")
    assert "edu_dl.autograd.tensor" not in ops.__dict__.values()
