"""The fused plan of the training steps as the course writes them: the lecture's
``w.assign(w - lr * grad)``, momentum and Adam with Variables, tanh; what must stay unfused says
why, once; every dialect's source (NumPy, Numba, CuPy) checked as text."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest

from edu_dl import graph as tf
from edu_dl.autograd import fusion

F64 = np.float64


def _data(n: int = 6, d: int = 5, h: int = 4, seed: int = 0) -> dict[str, np.ndarray]:
    r = np.random.default_rng(seed)
    return {"X": r.standard_normal((n, d)), "Y": r.standard_normal((n, d)),
            "w1": r.standard_normal((d, h)) / np.sqrt(d), "w2": r.standard_normal((h, d)) / 2}


def _lecture_step(data: dict[str, np.ndarray], optimize: str, lr: float = 1e-2,
                  update: str = "assign") -> dict[str, Any]:
    """The TensorFlow lecture's program in edu_dl.graph: Variables, gradients, and
    ``w.assign(w - lr * grad)`` grouped (update='assign'), or GradientDescentOptimizer."""
    g = tf.Graph()
    with g.as_default():
        x = tf.placeholder(F64, shape=data["X"].shape)
        y = tf.placeholder(F64, shape=data["Y"].shape)
        w1, w2 = tf.Variable(data["w1"]), tf.Variable(data["w2"])
        h = tf.maximum(tf.matmul(x, w1), 0)
        diff = tf.matmul(h, w2) - y
        loss = tf.reduce_mean(tf.reduce_sum(diff ** 2, axis=1))
        if update == "assign":
            grad_w1, grad_w2 = tf.gradients(loss, [w1, w2])
            train = tf.group(w1.assign(w1 - lr * grad_w1), w2.assign(w2 - lr * grad_w2))
        else:
            train = tf.train.GradientDescentOptimizer(lr).minimize(loss)
        init = tf.global_variables_initializer()
    sess = tf.Session(g, optimize=optimize)
    sess.run(init)
    feed = {x: data["X"], y: data["Y"]}
    return {"sess": sess, "fetches": [loss, train], "feed": feed, "w": (w1, w2)}


def _run(net: dict[str, Any], steps: int) -> tuple[list[Any], list[np.ndarray]]:
    sess = net["sess"]
    losses = [sess.run(net["fetches"], feed_dict=net["feed"])[0] for _ in range(steps)]
    return losses, [sess.run(w) for w in net["w"]]


def _plan(net: dict[str, Any]) -> Any:
    return net["sess"].plan_for(net["fetches"], net["feed"])


def _by_hand(data: dict[str, np.ndarray], steps: int, lr: float = 1e-2) -> tuple[list[float],
                                                                                 list[np.ndarray]]:
    X, Y, w1, w2 = data["X"], data["Y"], data["w1"].copy(), data["w2"].copy()
    losses = []
    for _ in range(steps):
        h = np.maximum(X @ w1, 0)
        diff = h @ w2 - Y
        losses.append(float(np.mean(np.sum(diff ** 2, axis=1))))
        grad_pred = 2 * diff / len(X)
        grad_w2 = h.T @ grad_pred
        grad_w1 = X.T @ (grad_pred @ w2.T * (h > 0))
        w1 -= lr * grad_w1
        w2 -= lr * grad_w2
    return losses, [w1, w2]


def test_the_lectures_assign_spelling_fuses_and_gives_the_unfused_numbers() -> None:
    data = _data()
    fused, unfused = _lecture_step(data, "numpy"), _lecture_step(data, "off")
    with warnings.catch_warnings():
        warnings.simplefilter("error", fusion.UnfusedPlanWarning)  # it fuses: nothing said
        got = _run(fused, 5)
    want = _run(unfused, 5)
    plan = _plan(fused)
    assert plan.fused is not None and plan.unfused_reason == ""
    # assign(w - lr * g) is w -= lr * g: in place, the same numbers to the last bit.
    assert [line.strip()[:6] for line in plan.source.splitlines() if "-= " in line] == [
        "w0 -= ", "w1 -= "]
    for a, b in zip(got[0] + got[1], want[0] + want[1]):
        np.testing.assert_array_equal(a, b)
    hand = _by_hand(data, 5)
    np.testing.assert_allclose(got[0], hand[0], rtol=1e-12)
    for mine, theirs in zip(got[1], hand[1]):
        np.testing.assert_allclose(mine, theirs, rtol=1e-12, atol=1e-14)
    # ... and the same code as the optimizer's assign_sub.
    minimize = _lecture_step(data, "numpy", update="minimize")
    _run(minimize, 2)
    assert _plan(minimize).fused.numpy_code == plan.fused.numpy_code


@pytest.mark.slow  # 2 s or more: make test-fast leaves it to make test
def test_the_lectures_assign_spelling_compiled_by_numba() -> None:
    if fusion.load_numba() is None:
        pytest.skip("Numba is not installed")
    data = _data()
    fused, unfused = _lecture_step(data, "numba"), _lecture_step(data, "off")
    got, want = _run(fused, 5), _run(unfused, 5)
    assert _plan(fused).fused.compiled
    for a, b in zip(got[0] + got[1], want[0] + want[1]):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)


def _two_variables(build: Any, optimize: str) -> dict[str, Any]:
    """A graph of two Variables a, b (3, 2) and a placeholder x; build(a, b, x) gives its
    fetches (a list whose first item is a value)."""
    r = np.random.default_rng(1)
    g = tf.Graph()
    with g.as_default():
        a, b = tf.Variable(r.standard_normal((3, 2))), tf.Variable(r.standard_normal((3, 2)))
        x = tf.placeholder(F64, shape=(3, 2))
        fetches = build(a, b, x)
        init = tf.global_variables_initializer()
    sess = tf.Session(g, optimize=optimize)
    sess.run(init)
    return {"sess": sess, "fetches": fetches, "feed": {x: r.standard_normal((3, 2))},
            "w": (a, b)}


def _momentum(a: Any, b: Any, x: Any) -> list[Any]:
    # a: the weights, b: their velocity. The weights' update reads the velocity's old value
    # (this run's reads all see old values): it must go first, in place.
    loss = tf.reduce_sum(a * x)
    grad, = tf.gradients(loss, [a])
    return [loss, tf.group(b.assign(0.9 * b + grad), a.assign(a - 0.1 * (0.9 * b + grad)))]


def _swap(a: Any, b: Any, x: Any) -> list[Any]:
    return [tf.reduce_sum(a * x), tf.group(a.assign(b * 1.0), b.assign(a + x))]


def _fetch_while_updating(a: Any, b: Any, x: Any) -> list[Any]:
    # The fetched a * 2 is this run's value, read before a's update.
    return [a * 2.0, a.assign_sub(x), b.assign(x * 3.0)]


@pytest.mark.parametrize("build", [_momentum, _fetch_while_updating])
def test_updates_that_read_other_updated_variables_fuse_in_order(build: Any) -> None:
    fused, unfused = _two_variables(build, "numpy"), _two_variables(build, "off")
    got, want = _run(fused, 4), _run(unfused, 4)
    assert _plan(fused).fused is not None
    for p, q in zip(got[0] + got[1], want[0] + want[1]):
        np.testing.assert_array_equal(p, q)


def test_a_cycle_of_updates_stays_unfused_and_says_why_once() -> None:
    net = _two_variables(_swap, "numpy")
    ref = _two_variables(_swap, "off")
    with pytest.warns(fusion.UnfusedPlanWarning) as said:
        got = _run(net, 3)
    assert len(said) == 1  # once, at the plan's first run
    message = str(said[0].message)
    assert "stays unfused" in message and "read each other's Variables" in message
    assert message.count(".") <= 3 and "\n" not in message  # one sentence
    plan = _plan(net)
    assert plan.fused is None and "read each other's Variables" in plan.unfused_reason
    want = _run(ref, 3)
    for p, q in zip(got[0] + got[1], want[0] + want[1]):
        np.testing.assert_array_equal(p, q)


def test_auto_keeps_quiet_and_records_the_reason() -> None:
    g = tf.Graph()
    with g.as_default():
        x = tf.placeholder(F64, shape=(2, 3))
        loss = tf.reduce_sum(x[0:1])  # a slice: not lowered
    sess = tf.Session(g)  # optimize='auto', the default
    with warnings.catch_warnings():
        warnings.simplefilter("error", fusion.UnfusedPlanWarning)
        sess.run(loss, feed_dict={x: np.ones((2, 3))})
    reason = sess.plan_for(loss, {x: np.ones((2, 3))}).unfused_reason
    assert reason.startswith("the op ")


def _adam_step(optimize: str) -> dict[str, Any]:
    r = np.random.default_rng(2)
    g = tf.Graph()
    with g.as_default():
        x = tf.placeholder(F64, shape=(5, 4))
        w = tf.Variable(r.standard_normal((4, 3)))
        loss = tf.reduce_mean(tf.reduce_sum(tf.tanh(tf.matmul(x, w)) ** 2, axis=1,
                                            keepdims=True))
        train = tf.train.AdamOptimizer(0.1).minimize(loss)
        init = tf.global_variables_initializer()
    sess = tf.Session(g, optimize=optimize)
    sess.run(init)
    return {"sess": sess, "fetches": [loss, train], "feed": {x: r.standard_normal((5, 4))},
            "w": (w,)}


@pytest.mark.slow  # 2 s or more: make test-fast leaves it to make test
def test_adam_with_tanh_and_keepdims_fuses_with_its_scalar_variables() -> None:
    fused, unfused = _adam_step("numpy"), _adam_step("off")
    got, want = _run(fused, 4), _run(unfused, 4)
    plan = _plan(fused)
    assert plan.fused is not None, plan.unfused_reason
    for p, q in zip(got[0] + got[1], want[0] + want[1]):
        np.testing.assert_allclose(p, q, rtol=1e-13, atol=1e-15)
    source = plan.source
    assert "np.tanh(" in source and "np.sqrt(" in source
    if fusion.load_numba() is not None:
        compiled = _adam_step("numba")
        got_numba = _run(compiled, 4)
        assert _plan(compiled).fused.compiled
        assert "[()] = " in _plan(compiled).source  # the 0-d beta powers, in place
        for p, q in zip(got_numba[0] + got_numba[1], want[0] + want[1]):
            np.testing.assert_allclose(p, q, rtol=1e-10, atol=1e-12)


def test_each_dialect_writes_the_set_and_the_subtract_updates() -> None:
    """The one writer's three dialects on one program: a subtracting update (the lecture's
    assign) and a set one, as text."""
    net = _two_variables(lambda a, b, x: [tf.reduce_sum(a * x),
                                          tf.group(a.assign(a - 0.5 * x), b.assign(x * 3.0))],
                         "numpy")
    _run(net, 2)
    program = _plan(net).fused.program
    numpy_code = fusion.numpy_source(program)
    assert "    w0 -= (float64(0.5) * x0)\n" in numpy_code
    assert "    w1[...] = (x0 * float64(3.0))\n" in numpy_code
    numba_code = fusion.numba_source(program, gemm=False)
    assert "w0[i0, i1] -= (float64(0.5) * x0[i0, i1])" in numba_code
    assert "w1[i0, i1] = (x0[i0, i1] * float64(3.0))" in numba_code
    kernels: dict[str, Any] = {}
    cupy_code = fusion.cupy_source(program, kernels)
    bodies = {out: body for _, out, body in kernels.values()}
    assert bodies["float64 w0"] == "w0 = w0 - ((((double)0.5) * x0))"
    assert bodies["float64 w1"] == "w1 = (x0 * ((double)3.0))"
    assert "(x0, w1)  # w1 = " in cupy_code
    for code in (numpy_code, numba_code, cupy_code):  # one walk: one def, one return
        assert code.count("def step(") == 1 and code.count("    return (") == 1
