"""The static engine (edu_dl.graph, TF 1.x names): values, gradients, plans, Variables, errors."""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from fixtures.frameworks import torch

import edu_dl
from edu_dl import backend, ops
from edu_dl import graph as tf

F64 = np.float64


@pytest.fixture
def g() -> Any:
    """A fresh Graph as the default for the test's nodes."""
    graph = tf.Graph()
    with graph.as_default():
        yield graph


def _rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


# --------------------------------------------------------------------------- static == eager

# Each case: a function written once with edu_dl.graph's names (they run on Tensors eagerly and
# build nodes on placeholders), the float inputs, and extra non-differentiable inputs.
Case = tuple[Callable[..., Any], list[np.ndarray], list[np.ndarray]]


def _case_mlp() -> Case:
    def f(x, w1, w2):
        h = tf.maximum(tf.matmul(x, w1), 0.0)
        return tf.reduce_mean(tf.reduce_sum((tf.matmul(h, w2) - 1.0) ** 2, axis=1))

    r = _rng(1)
    return f, [r.standard_normal((6, 4)), r.standard_normal((4, 5)),
               r.standard_normal((5, 3))], []


def _case_elementwise() -> Case:
    def f(x, y):
        return tf.reduce_sum(tf.tanh(x) * tf.sigmoid(y) + tf.exp(0.3 * x) + tf.log(y * y + 1.0)
                             - x / (y * y + 2.0))

    r = _rng(2)
    return f, [r.standard_normal((3, 4)), r.standard_normal((3, 4))], []


def _case_broadcast() -> Case:
    def f(x, b, c):
        z = (x + b) * c + x  # (4, 1, 3) + (5, 1) -> (4, 5, 3), then * (3,)
        return tf.reduce_mean(tf.reduce_sum(z * z, axis=(0, 2)) + tf.reduce_sum(b))

    r = _rng(3)
    return f, [r.standard_normal((4, 1, 3)), r.standard_normal((5, 1)),
               r.standard_normal(3)], []


def _case_reshape_transpose() -> Case:
    def f(x, w):
        t = tf.transpose(tf.reshape(x, (3, 8)))  # (8, 3)
        u = tf.transpose(tf.reshape(t, (2, 4, 3)), (2, 0, 1))  # (3, 2, 4)
        return tf.reduce_sum(tf.tanh(tf.matmul(tf.reshape(u, (6, 4)), w)))

    r = _rng(4)
    return f, [r.standard_normal((2, 12)), r.standard_normal((4, 2))], []


def _case_indexing() -> Case:
    def f(x):
        a = x[1:, ::2]                    # basic slicing
        b = x[np.array([0, 2, 0, 3])]    # advanced, with a repeated row
        return tf.reduce_sum(a * a) + tf.reduce_sum(tf.exp(b * 0.5)) + x[2, 1] * 3.0

    r = _rng(5)
    return f, [r.standard_normal((4, 5))], []


def _case_cross_entropy() -> Case:
    def f(x, w, labels):
        logits = tf.matmul(x, w)
        return tf.reduce_mean(
            tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))

    r = _rng(6)
    return f, [r.standard_normal((7, 4)) * 2, r.standard_normal((4, 5))], [
        np.array([0, 4, 2, 2, 1, 3, 0])]


CASES = {
    "matmul_maximum_sum_mean": _case_mlp,
    "tanh_sigmoid_exp_log": _case_elementwise,
    "broadcasting_adds": _case_broadcast,
    "reshape_transpose": _case_reshape_transpose,
    "indexing": _case_indexing,
    "sparse_softmax_cross_entropy": _case_cross_entropy,
}


@pytest.mark.parametrize("name", CASES)
def test_static_equals_eager(name: str, g: tf.Graph) -> None:
    f, inputs, extras = CASES[name]()
    # Eager: define-by-run, loss.backward().
    tensors = [edu_dl.tensor(a, requires_grad=True) for a in inputs]
    eager_loss = f(*tensors, *extras)
    assert isinstance(eager_loss, edu_dl.Tensor)
    eager_loss.backward()
    # Static: build once with placeholders, then run.
    phs = [tf.placeholder(F64, a.shape) for a in inputs]
    ex_phs = [tf.placeholder(e.dtype, e.shape) for e in extras]
    loss = f(*phs, *ex_phs)
    assert isinstance(loss, tf.Node)
    grads = tf.gradients(loss, phs)
    feed = dict(zip(phs + ex_phs, inputs + extras))
    with tf.Session() as sess:
        loss_val, grad_vals = sess.run((loss, grads), feed_dict=feed)
    np.testing.assert_allclose(loss_val, eager_loss.item(), rtol=1e-12, atol=1e-12)
    for t, gv in zip(tensors, grad_vals):
        assert gv.shape == t.shape and gv.dtype == F64
        np.testing.assert_allclose(gv, t.grad.numpy(), rtol=1e-12, atol=1e-12)
        assert np.abs(gv).max() > 0


def test_static_cross_entropy_equals_torch(g: tf.Graph) -> None:
    """One anchor outside edu_dl, so both engines cannot share a wrong rule unnoticed."""
    f, (x, w), (labels,) = _case_cross_entropy()
    px, pw = tf.placeholder(F64, x.shape), tf.placeholder(F64, w.shape)
    plab = tf.placeholder(tf.int64, (None,))
    loss = f(px, pw, plab)
    gx, gw = tf.gradients(loss, [px, pw])
    tx, tw = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
    tloss = torch.nn.functional.cross_entropy(tx @ tw, torch.tensor(labels))
    tloss.backward()
    with tf.Session() as sess:
        vals = sess.run([loss, gx, gw], {px: x, pw: w, plab: labels})
    np.testing.assert_allclose(vals[0], tloss.item(), rtol=1e-12)
    np.testing.assert_allclose(vals[1], tx.grad.numpy(), rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(vals[2], tw.grad.numpy(), rtol=1e-10, atol=1e-14)


# --------------------------------------------------------------------------- gradients()


def test_gradients_none_for_independent_x(g: tf.Graph) -> None:
    x, z = tf.placeholder(F64, (3,)), tf.placeholder(F64, (3,))
    y = tf.reduce_sum(x * x)
    gx, gz = tf.gradients(y, [x, z])
    assert gz is None and gx is not None
    assert tf.gradients(y, z) == [None]


def test_gradients_sum_over_list_of_ys(g: tf.Graph) -> None:
    x = tf.placeholder(F64, (4,))
    y1, y2 = tf.reduce_sum(x * x), tf.reduce_sum(3.0 * x)
    (both,) = tf.gradients([y1, y2], x)
    (only1,) = tf.gradients(y1, x)
    xv = np.array([1.0, -2.0, 0.5, 3.0])
    with tf.Session() as sess:
        b, o = sess.run([both, only1], {x: xv})
    np.testing.assert_allclose(b, 2 * xv + 3)
    np.testing.assert_allclose(o, 2 * xv)


def test_gradients_grad_ys(g: tf.Graph) -> None:
    x = tf.placeholder(F64, (2, 3))
    gy = tf.placeholder(F64, (2, 3))
    y = x * x
    (gx,) = tf.gradients(y, x, grad_ys=gy)
    (gx_ones,) = tf.gradients(y, x)  # a non-scalar y without grad_ys: seeded with ones
    xv, gyv = _rng(7).standard_normal((2, 3)), _rng(8).standard_normal((2, 3))
    with tf.Session() as sess:
        a, b = sess.run([gx, gx_ones], {x: xv, gy: gyv})
    np.testing.assert_allclose(a, 2 * xv * gyv)
    np.testing.assert_allclose(b, 2 * xv)
    with pytest.raises(ValueError, match="grad_ys"):
        tf.gradients([y, y], x, grad_ys=[gy])


def test_gradients_wrt_intermediate_node(g: tf.Graph) -> None:
    x = tf.placeholder(F64, (3,))
    h = tf.tanh(x)
    y = tf.reduce_sum(h * h * 2.0)
    gh, gx = tf.gradients(y, [h, x])
    xv = np.array([0.1, -0.7, 1.3])
    with tf.Session() as sess:
        ghv, gxv = sess.run([gh, gx], {x: xv})
    np.testing.assert_allclose(ghv, 4 * np.tanh(xv), rtol=1e-14)
    np.testing.assert_allclose(gxv, 4 * np.tanh(xv) * (1 - np.tanh(xv) ** 2), rtol=1e-14)


def test_gradients_accumulate_for_a_node_used_twice(g: tf.Graph) -> None:
    x = tf.placeholder(F64, (3,))
    y = tf.reduce_sum(x * x + x)  # x feeds Mul twice and Add once
    (gx,) = tf.gradients(y, x)
    xv = np.array([1.0, 2.0, -3.0])
    with tf.Session() as sess:
        np.testing.assert_allclose(sess.run(gx, {x: xv}), 2 * xv + 1)


def test_gradient_of_y_wrt_itself_is_the_seed(g: tf.Graph) -> None:
    x = tf.placeholder(F64, (2,))
    (gx,) = tf.gradients(x, x)
    with tf.Session() as sess:
        np.testing.assert_array_equal(sess.run(gx, {x: np.array([5.0, 6.0])}), [1.0, 1.0])


def _sweeps(plan: tf.Plan) -> list[Any]:
    return [step for step in plan.steps if isinstance(step, tf.Sweep)]


def test_several_gradients_of_one_loss_run_one_backward_sweep(g: tf.Graph) -> None:
    x = tf.placeholder(F64, (4, 3))
    w1, w2 = tf.placeholder(F64, (3, 5)), tf.placeholder(F64, (5, 2))
    loss = tf.reduce_sum(tf.matmul(tf.maximum(tf.matmul(x, w1), 0.0), w2) ** 2)
    gw1, gw2 = tf.gradients(loss, [w1, w2])
    (gx,) = tf.gradients(loss, x)  # a separate call for the same loss joins the same sweep
    r = _rng(9)
    feed = {x: r.standard_normal((4, 3)), w1: r.standard_normal((3, 5)),
            w2: r.standard_normal((5, 2))}
    with tf.Session() as sess:
        plan = sess.plan_for([loss, gw1, gw2, gx], feed)
        assert len(_sweeps(plan)) == 1
        assert "1 backward sweep" in str(plan)
        # A different loss needs its own sweep.
        (g_other,) = tf.gradients(tf.reduce_sum(x), x)
        assert len(_sweeps(sess.plan_for([gw1, g_other], feed))) == 2
        values = sess.run([gw1, gw2, gx], feed)
    # The one sweep gave every gradient, and right (checked against the eager engine).
    ts = {k: edu_dl.tensor(v, requires_grad=True) for k, v in zip("xab", feed.values())}
    eager = (((ts["x"] @ ts["a"]).maximum(0.0) @ ts["b"]) ** 2).sum()
    eager.backward()
    for v, t in zip(values, (ts["a"], ts["b"], ts["x"])):
        np.testing.assert_allclose(v, t.grad.numpy(), rtol=1e-12)


def test_gradients_of_gradients_are_a_clear_error(g: tf.Graph) -> None:
    """Not supported: say so, rather than answer None (which would claim 'no dependence')."""
    x = tf.placeholder(F64, (2,))
    (gx,) = tf.gradients(tf.reduce_sum(x * x * x), x)
    with pytest.raises(NotImplementedError, match="higher-order"):
        tf.gradients(tf.reduce_sum(gx), x)
    with pytest.raises(NotImplementedError, match="higher-order"):
        tf.gradients(tf.reduce_sum(gx * x), x)


# --------------------------------------------------------------------------- plans


def test_plan_is_made_once_and_reused(g: tf.Graph) -> None:
    x = tf.placeholder(F64, (None, 2))
    y = tf.reduce_sum(x * 2.0)
    with tf.Session() as sess:
        feed = {x: np.ones((3, 2))}
        plan = sess.plan_for(y, feed)
        assert sess.plan_for(y, feed) is plan
        assert sess.plan_for([y], {x: np.zeros((5, 2))}) is plan  # same nodes, other values
        assert sess.run(y, feed) == 12.0
        assert sess.plan_for(y, feed) is plan
        assert sess.plan_for([y, x], feed) is not plan


def test_plan_runs_only_what_the_fetch_needs(g: tf.Graph) -> None:
    x = tf.placeholder(F64, (None, 4))
    z = tf.placeholder(F64, (None, 4), name="unused_input")  # never fed
    cheap = tf.reduce_sum(x)
    h = z
    for _ in range(5):
        h = tf.tanh(tf.matmul(h, tf.placeholder(F64, (4, 4))))
    expensive = tf.reduce_sum(h)
    feed = {x: np.ones((2, 4))}
    with tf.Session() as sess:
        plan = sess.plan_for(cheap, feed)
        assert plan.ops_run == 1 and plan.placeholders == [x]
        assert plan.graph_size == len(g.nodes) > 15
        assert sess.run(cheap, feed) == 8.0  # the unfed placeholders are not required
        with pytest.raises(ValueError, match="needs a value"):
            sess.run([cheap, expensive], feed)


def test_constant_subgraph_is_folded_once(g: tf.Graph, monkeypatch: pytest.MonkeyPatch) -> None:
    a = np.array([[0.5, -1.0], [2.0, 0.25]])
    x = tf.placeholder(F64, (None, 2))
    folded = tf.exp(tf.constant(a)) * 2.0      # depends on constants only
    out = tf.reduce_sum(tf.matmul(x, folded))
    other = tf.reduce_mean(folded) + tf.reduce_sum(x)
    calls = {"exp": 0}
    forward = ops.Exp.forward

    def counting_forward(self: ops.Op, xp: Any, *arrays: Any) -> Any:
        calls["exp"] += 1
        return forward(self, xp, *arrays)

    monkeypatch.setattr(ops.Exp, "forward", counting_forward)
    xv = _rng(10).standard_normal((3, 2))
    with tf.Session() as sess:
        plan = sess.plan_for(out, {x: xv})
        assert plan.folded == 2  # exp and the product
        assert plan.ops_run == 2  # matmul and reduce_sum
        for _ in range(3):
            np.testing.assert_allclose(sess.run(out, {x: xv}), (xv @ (np.exp(a) * 2)).sum(),
                                       rtol=1e-14)
        np.testing.assert_allclose(sess.run(other, {x: xv}), (np.exp(a) * 2).mean() + xv.sum(),
                                   rtol=1e-14)
        assert calls["exp"] == 1  # once for the Session, across runs and plans
    # The eager engine, by contrast, runs exp every time.
    for _ in range(2):
        tf.exp(edu_dl.tensor(a))
    assert calls["exp"] == 3


def test_folding_does_not_block_gradients_wrt_a_constant(g: tf.Graph) -> None:
    c = tf.constant(np.array([1.0, 2.0]))
    y = tf.reduce_sum(tf.exp(c) * 3.0)
    (gc,) = tf.gradients(y, c)
    with tf.Session() as sess:
        assert sess.plan_for(y).folded == 3
        np.testing.assert_allclose(sess.run(gc), 3 * np.exp([1.0, 2.0]))
        np.testing.assert_allclose(sess.run([y, gc])[0], 3 * np.exp([1.0, 2.0]).sum())


# --------------------------------------------------------------------------- Variables


def test_uninitialized_variable_is_a_clear_error(g: tf.Graph) -> None:
    w = tf.Variable(np.ones(2), name="weights")
    with tf.Session() as sess, pytest.raises(
            RuntimeError, match=r"'weights'.*not initialized.*global_variables_initializer"):
        sess.run(w * 2.0)


def test_global_variables_initializer(g: tf.Graph) -> None:
    w = tf.Variable(np.array([1.0, 2.0]))
    b = tf.Variable(tf.random_normal((3,), seed=0, dtype=F64))
    init = tf.global_variables_initializer()
    with tf.Session() as sess:
        assert sess.run(init) is None
        np.testing.assert_array_equal(sess.run(w), [1.0, 2.0])
        np.testing.assert_array_equal(sess.run(b), np.random.default_rng(0).normal(0, 1, 3))
        sess.run(w.assign([5.0, 6.0]))
        sess.run(init)  # initializing again restores the initial values
        np.testing.assert_array_equal(sess.run(w), [1.0, 2.0])
    with tf.Session() as other:  # Variables live in a Session, not in the graph
        with pytest.raises(RuntimeError, match="not initialized"):
            other.run(w)


def test_assign_forms(g: tf.Graph) -> None:
    w = tf.Variable(np.array([1.0, 2.0]))
    delta = tf.placeholder(F64, (2,))
    set_w = tf.assign(w, delta)
    set_w_method = w.assign(delta * 10.0)
    sub, add = w.assign_sub(delta), w.assign_add(delta)
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        d = np.array([0.5, -1.0])
        np.testing.assert_array_equal(sess.run(set_w, {delta: d}), d)  # fetching gives the new
        np.testing.assert_array_equal(sess.run(w), d)
        sess.run(set_w_method, {delta: d})
        np.testing.assert_array_equal(sess.run(w), 10 * d)
        sess.run(sub, {delta: d})
        np.testing.assert_array_equal(sess.run(w), 9 * d)
        sess.run(add, {delta: 3 * d})
        np.testing.assert_array_equal(sess.run(w), 12 * d)
    with pytest.raises(TypeError, match="not a Variable"):
        delta.assign(1.0)


def test_assignments_commit_after_the_run(g: tf.Graph) -> None:
    """As in TF: a run fetching [loss, update] returns the loss of the OLD weights."""
    w = tf.Variable(np.array([3.0]))
    loss = tf.reduce_sum(w * w)
    update = w.assign(w - 1.0)
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        assert sess.run([loss, update])[0] == 9.0
        assert sess.run([loss, update])[0] == 4.0
        assert sess.run(loss) == 1.0
        # Values fetched with an update are this run's reads, even views of the Variable and
        # even when the update (assign_sub, minimize) changes the stored array in place.
        view, step = tf.reshape(w, (1, 1)), w.assign_sub(np.ones(1))
        old_w, old_view, new_w = sess.run([w, view, step])
        assert old_w[0] == 1.0 and old_view[0, 0] == 1.0 and new_w[0] == 0.0
        assert sess.run(w)[0] == 0.0


def test_assign_with_wrong_shape_is_a_clear_error(g: tf.Graph) -> None:
    w = tf.Variable(np.zeros((3, 2)), name="w")
    with pytest.raises(ValueError, match=r"'w' has shape \(3, 2\).*\(2, 3\)"):
        w.assign(np.zeros((2, 3)))
    with pytest.raises(ValueError, match=r"'w' has shape \(3, 2\).*\(\)"):
        w.assign_sub(1.0)  # as in TF: the delta must have the Variable's shape
    v = tf.placeholder(F64, (None, 2))
    bad = w.assign(v)  # shape unknown at build time: checked when run
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        with pytest.raises(ValueError, match=r"'w'.*\(3, 2\).*\(4, 2\)"):
            sess.run(bad, {v: np.ones((4, 2))})
        np.testing.assert_array_equal(sess.run(w), np.zeros((3, 2)))  # nothing committed


def test_fetched_values_do_not_alias_session_state(g: tf.Graph) -> None:
    """Changing a fetched array (as `values[w1] -= ...` does) must not change the Session."""
    init = np.array([1.0, 2.0])
    w = tf.Variable(init)
    c = tf.constant(np.array([3.0, 4.0]))
    view = tf.reshape(w, (2, 1))
    folded = tf.exp(c) * 1.0
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        for node in (w, c, view, w[:1], folded, w.assign(w * 1.0)):
            value = sess.run(node)
            value += 100.0
        np.testing.assert_array_equal(sess.run(w), [1.0, 2.0])
        np.testing.assert_array_equal(sess.run(c), [3.0, 4.0])
        np.testing.assert_array_equal(sess.run(folded), np.exp([3.0, 4.0]))
    init += 1.0  # the graph keeps its own copy of the initial value
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        np.testing.assert_array_equal(sess.run(w), [1.0, 2.0])


def _regression(g: tf.Graph, seed: int = 11):
    r = _rng(seed)
    X, Y = r.standard_normal((8, 3)), r.standard_normal((8, 2))
    w0, b0 = r.standard_normal((3, 2)), r.standard_normal(2)
    x, y = tf.placeholder(F64, (None, 3)), tf.placeholder(F64, (None, 2))
    w, b = tf.Variable(w0), tf.Variable(b0)
    loss = tf.reduce_mean(tf.reduce_sum((tf.matmul(x, w) + b - y) ** 2, axis=1))
    return (X, Y, w0, b0), (x, y, w, b, loss)


@pytest.mark.parametrize("make", [tf.GradientDescentOptimizer, tf.train.GradientDescentOptimizer])
def test_gradient_descent_equals_hand_written_update(g: tf.Graph, make: Any) -> None:
    (X, Y, w_np, b_np), (x, y, w, b, loss) = _regression(g)
    lr = 0.1
    train = make(lr).minimize(loss)
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        for _ in range(5):
            diff = X @ w_np + b_np - Y  # d loss / d y_hat = 2 diff / N
            loss_np = (diff**2).sum(axis=1).mean()
            grad_w, grad_b = X.T @ (2 * diff / len(X)), (2 * diff / len(X)).sum(axis=0)
            loss_val, none = sess.run([loss, train], {x: X, y: Y})
            assert none is None
            np.testing.assert_allclose(loss_val, loss_np, rtol=1e-13)
            w_np, b_np = w_np - lr * grad_w, b_np - lr * grad_b
            np.testing.assert_allclose(sess.run(w), w_np, rtol=1e-13)
            np.testing.assert_allclose(sess.run(b), b_np, rtol=1e-13)


def test_minimize_without_variables_is_a_clear_error(g: tf.Graph) -> None:
    x = tf.placeholder(F64, (2,))
    with pytest.raises(ValueError, match="no trainable Variable"):
        tf.GradientDescentOptimizer(0.1).minimize(tf.reduce_sum(x))
    with pytest.raises(ValueError, match="learning rate"):
        tf.GradientDescentOptimizer(0.0)


@pytest.mark.parametrize("make", [tf.AdamOptimizer, tf.train.AdamOptimizer])
def test_adam_equals_torch(g: tf.Graph, make: Any) -> None:
    (X, Y, w0, b0), (x, y, w, b, loss) = _regression(g, seed=12)
    lr, betas, eps = 0.05, (0.85, 0.995), 1e-7
    train = make(lr, beta1=betas[0], beta2=betas[1], epsilon=eps).minimize(loss)
    tw, tb = torch.tensor(w0, requires_grad=True), torch.tensor(b0, requires_grad=True)
    topt = torch.optim.Adam([tw, tb], lr=lr, betas=betas, eps=eps)
    tX, tY = torch.tensor(X), torch.tensor(Y)
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        for _ in range(6):
            loss_val, _ = sess.run([loss, train], {x: X, y: Y})
            topt.zero_grad()
            tloss = ((tX @ tw + tb - tY) ** 2).sum(dim=1).mean()
            tloss.backward()
            topt.step()
            assert abs(loss_val - tloss.item()) < 1e-9 * tloss.item()
            for ours, theirs in ((sess.run(w), tw), (sess.run(b), tb)):
                ref = theirs.detach().numpy()
                assert np.abs(ours - ref).max() / np.abs(ref).max() < 1e-9
        assert np.abs(sess.run(w) - w0).max() > 0.1  # the weights moved


# --------------------------------------------------------------------------- fetches and feeds


def test_fetch_structures(g: tf.Graph) -> None:
    x = tf.placeholder(F64, (2,))
    a, b, c = x * 2.0, tf.reduce_sum(x), x + 1.0
    grp = tf.group(a, b)
    feed = {x: np.array([1.0, 2.0])}
    with tf.Session() as sess:
        np.testing.assert_array_equal(sess.run(a, feed), [2.0, 4.0])
        out_list = sess.run([a, b], feed)
        assert isinstance(out_list, list) and out_list[1] == 3.0
        out_tuple = sess.run((b, c), feed)
        assert isinstance(out_tuple, tuple) and out_tuple[0] == 3.0
        out_dict = sess.run({"a": a, "b": b}, feed)
        assert set(out_dict) == {"a", "b"} and out_dict["b"] == 3.0
        nested = sess.run({"first": [a, (b, c)], "second": {"deep": b}, "g": grp}, feed)
        np.testing.assert_array_equal(nested["first"][1][1], [2.0, 3.0])
        assert nested["second"]["deep"] == 3.0 and nested["g"] is None
        assert isinstance(nested["first"][1], tuple)
        assert sess.run(grp, feed) is None
        assert sess.run([], feed) == []
        scalar = sess.run(b, feed)
        assert np.ndim(scalar) == 0 and float(scalar) == 3.0


@pytest.mark.parametrize("bad", [3, "loss", 2.5, None, np.ones(2)])
def test_unknown_fetch_is_a_clear_error(g: tf.Graph, bad: Any) -> None:
    x = tf.placeholder(F64, (2,))
    with tf.Session() as sess, pytest.raises(TypeError, match="cannot fetch"):
        sess.run([x * 2.0, bad], {x: np.ones(2)})


def test_fetch_from_another_graph_is_a_clear_error(g: tf.Graph) -> None:
    with tf.Graph().as_default():
        foreign = tf.constant(1.0, name="foreign")
    with tf.Session() as sess, pytest.raises(ValueError, match=r"'foreign'.*another Graph"):
        sess.run(foreign)


def test_mixing_graphs_in_one_op_is_a_clear_error(g: tf.Graph) -> None:
    with tf.Graph().as_default():
        foreign = tf.constant(1.0, name="foreign")
    with pytest.raises(ValueError, match=r"'foreign'.*another Graph"):
        tf.placeholder(F64, ()) + foreign


@pytest.mark.parametrize("key", ["x", 0, "op"])
def test_feed_keys_must_be_placeholders_or_variables(g: tf.Graph, key: Any) -> None:
    x = tf.placeholder(F64, (2,))
    y = x * 2.0
    feed_key = y if key == "op" else key
    with tf.Session() as sess, pytest.raises(TypeError, match="placeholders or Variables"):
        sess.run(y, {x: np.ones(2), feed_key: np.ones(2)})


def test_feeding_a_variable_overrides_it_for_one_run(g: tf.Graph) -> None:
    w = tf.Variable(np.array([1.0, 2.0]))
    y = tf.reduce_sum(w * 3.0)
    with tf.Session() as sess:
        assert sess.run(y, {w: np.array([1.0, 1.0])}) == 6.0  # no initializer needed
        sess.run(tf.global_variables_initializer())
        assert sess.run(y) == 9.0


def test_feeding_a_node_value_is_a_clear_error(g: tf.Graph) -> None:
    x = tf.placeholder(F64, (2,), name="x")
    with tf.Session() as sess, pytest.raises(TypeError, match=r"'x'.*graph node"):
        sess.run(x * 1.0, {x: tf.constant(np.ones(2))})


def test_closed_session_is_a_clear_error(g: tf.Graph) -> None:
    sess = tf.Session()
    sess.close()
    with pytest.raises(RuntimeError, match="closed"):
        sess.run(tf.constant(1.0))


# --------------------------------------------------------------------------- clear errors


def test_missing_feed_names_the_placeholder_and_its_shape(g: tf.Graph) -> None:
    x = tf.placeholder(F64, (None, 1000), name="x")
    w = tf.placeholder(F64, (1000, 100), name="w1")
    y = tf.matmul(x, w)
    with tf.Session() as sess:
        with pytest.raises(ValueError, match=re.escape("'w1' (shape (1000, 100)")):
            sess.run(y, {x: np.ones((2, 1000))})
        with pytest.raises(ValueError, match=re.escape("'x' (shape (None, 1000)")):
            sess.run(y, {w: np.ones((1000, 100))})


def test_wrongly_shaped_feed_names_the_placeholder_and_shapes(g: tf.Graph) -> None:
    x = tf.placeholder(F64, (None, 3), name="x")
    y = tf.reduce_sum(x)
    with tf.Session() as sess:
        with pytest.raises(ValueError, match=re.escape("'x' expects shape (None, 3), but the "
                                                       "value fed has shape (2, 4)")):
            sess.run(y, {x: np.ones((2, 4))})
        with pytest.raises(ValueError, match=re.escape("(None, 3)")):
            sess.run(y, {x: np.ones(3)})  # wrong rank
        assert sess.run(y, {x: np.ones((5, 3))}) == 15.0  # None accepts any size
        # A shape accepted once is remembered; a wrong one after it is still refused.
        with pytest.raises(ValueError, match=re.escape("value fed has shape (5, 4)")):
            sess.run(y, {x: np.ones((5, 4))})


def test_feeds_take_the_placeholder_dtype_and_arrays_of_it_are_used_as_they_are(
        g: tf.Graph) -> None:
    x = tf.placeholder(tf.float32, (None, 2), name="x")
    y = x * 2
    with tf.Session() as sess:
        assert sess.run(y, {x: np.ones((1, 2))}).dtype == np.float32       # float64 converted
        assert sess.run(y, {x: [[1, 2]]}).tolist() == [[2.0, 4.0]]         # a list converted
        same = np.ones((3, 2), np.float32)
        assert sess.run(y, {x: same}).dtype == np.float32 and same.tolist() == [[1.0, 1.0]] * 3


def test_a_feed_dict_in_another_order_finds_the_same_plan(g: tf.Graph) -> None:
    a, b = tf.placeholder(F64, (2,)), tf.placeholder(F64, (2,))
    y = a + b
    with tf.Session() as sess:
        plan = sess.plan_for(y, {a: np.zeros(2), b: np.ones(2)})
        assert sess.plan_for(y, {b: np.ones(2), a: np.zeros(2)}) is plan
        assert sess.run(y, {b: np.ones(2), a: np.full(2, 2.0)}).tolist() == [3.0, 3.0]


def test_matmul_shape_mismatch_at_build_time(g: tf.Graph) -> None:
    a, b = tf.placeholder(F64, (2, 3)), tf.placeholder(F64, (4, 5))
    with pytest.raises(ValueError, match=r"matmul.*\(2, 3\).*\(4, 5\)"):
        tf.matmul(a, b)
    with pytest.raises(ValueError, match=r"matmul.*\(2, 3\).*\(4, 5\)"):
        a @ b


def test_broadcast_mismatch_at_build_time_names_the_op(g: tf.Graph) -> None:
    a, b = tf.placeholder(F64, (2, 3)), tf.placeholder(F64, (4,))
    with pytest.raises(ValueError, match=r"add.*\(2, 3\).*\(4,\)"):
        a + b


def test_matmul_shape_mismatch_at_run_time_names_the_node(g: tf.Graph) -> None:
    a, b = tf.placeholder(F64, (None, 3)), tf.placeholder(F64, (None, 4))
    c = tf.matmul(a, b)
    assert c.shape is None  # unknown until run
    with tf.Session() as sess, pytest.raises(
            ValueError, match=rf"'{c.name}'.*matmul.*\(2, 3\), \(5, 4\)"):
        sess.run(c, {a: np.ones((2, 3)), b: np.ones((5, 4))})


def test_build_time_shapes_are_inferred(g: tf.Graph) -> None:
    x = tf.placeholder(tf.float32, (64, 10))
    w = tf.Variable(np.zeros((10, 3), dtype=np.float32))
    y = tf.reduce_sum(tf.maximum(tf.matmul(x, w), 0), axis=1)
    assert y.shape == (64,) and y.dtype == np.float32
    assert "shape=(64,)" in repr(y) and "float32" in repr(y)


# --------------------------------------------------------------------------- graph mechanics


def test_graph_as_default_isolates_nodes() -> None:
    outer = tf.get_default_graph()
    before = len(outer.nodes)
    inner = tf.Graph()
    with inner.as_default():
        assert tf.get_default_graph() is inner
        x = tf.placeholder(F64, (2,))
        y = x * 2.0
    assert tf.get_default_graph() is outer
    assert len(outer.nodes) == before
    assert x.graph is inner and y.graph is inner and y in inner.nodes and len(inner.nodes) == 3
    with tf.Session(graph=inner) as sess:
        np.testing.assert_array_equal(sess.run(y, {x: np.ones(2)}), [2.0, 2.0])
    with pytest.raises(ValueError, match="another Graph"):
        tf.Session().run(y, {x: np.ones(2)})


def test_reset_default_graph() -> None:
    tf.placeholder(F64, (1,))
    old = tf.get_default_graph()
    tf.reset_default_graph()
    new = tf.get_default_graph()
    assert new is not old and new.nodes == [] and new.variables == []
    assert tf.placeholder(F64, (1,)).name == "Placeholder"  # names start over
    with tf.Graph().as_default(), pytest.raises(RuntimeError, match="reset_default_graph"):
        tf.reset_default_graph()
    tf.reset_default_graph()


def test_unique_names(g: tf.Graph) -> None:
    names = [tf.placeholder(F64, (1,)).name for _ in range(3)]
    assert names == ["Placeholder", "Placeholder_1", "Placeholder_2"]
    assert tf.placeholder(F64, (1,), name="x").name == "x"
    assert tf.placeholder(F64, (1,), name="x").name == "x_1"
    assert tf.Variable(1.0).name == "Variable"
    a = tf.placeholder(F64, (1,))
    assert (a + a).name == "Add" and (a + a).name == "Add_1" and a[0].name == "strided_slice"


def test_gpu_without_gpu_is_a_device_error(g: tf.Graph, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(backend, "gpu_status", lambda: (False, "CuPy is not installed"))
    with pytest.raises(backend.DeviceError, match="device='cpu'") as info:
        tf.Session(device="gpu")
    assert "No GPU" in str(info.value)
    with pytest.raises(ValueError, match="unknown device"):
        tf.Session(device="tpu")


@pytest.mark.parametrize("device", [
    "cpu",
    pytest.param("gpu", marks=pytest.mark.skipif(
        not edu_dl.gpu_status()[0], reason="no CUDA GPU with CuPy on this machine")),
])
def test_session_runs_on_device(g: tf.Graph, device: str) -> None:
    r = _rng(13)
    X, W0 = r.standard_normal((5, 4)), r.standard_normal((4, 3))
    x, w = tf.placeholder(F64, (None, 4)), tf.Variable(W0)
    loss = tf.reduce_sum(tf.maximum(tf.matmul(x, w), 0.0) ** 2)
    (gw,) = tf.gradients(loss, w)
    train = tf.GradientDescentOptimizer(0.01).minimize(loss)
    with tf.Session(device=device) as sess:
        assert sess.device == device
        sess.run(tf.global_variables_initializer())
        loss_val, gw_val, _ = sess.run([loss, gw, train], {x: X})
        w_val = sess.run(w)
    assert isinstance(gw_val, np.ndarray) and isinstance(w_val, np.ndarray)
    h = X @ W0
    np.testing.assert_allclose(loss_val, (np.maximum(h, 0) ** 2).sum(), rtol=1e-12)
    expected = X.T @ (2 * np.maximum(h, 0))
    np.testing.assert_allclose(gw_val, expected, rtol=1e-12)
    np.testing.assert_allclose(w_val, W0 - 0.01 * expected, rtol=1e-12)


# --------------------------------------------------------------------------- the lecture


def test_lecture_tf1_program_runs_and_the_loss_falls() -> None:
    """The lecture's TF 1.x program, line for line, with `import edu_dl.graph as tf`."""
    rng = np.random.default_rng(0)
    with tf.Graph().as_default():
        N, D, H = 64, 1000, 100
        x = tf.placeholder(tf.float32, shape=(N, D))
        y = tf.placeholder(tf.float32, shape=(N, D))
        w1 = tf.placeholder(tf.float32, shape=(D, H))
        w2 = tf.placeholder(tf.float32, shape=(H, D))
        h = tf.maximum(tf.matmul(x, w1), 0)
        y_pred = tf.matmul(h, w2)
        diff = y_pred - y
        loss = tf.reduce_mean(tf.reduce_sum(diff ** 2, axis=1))
        grad_w1, grad_w2 = tf.gradients(loss, [w1, w2])
        with tf.Session() as sess:
            values = {x: rng.standard_normal((N, D)), w1: rng.standard_normal((D, H)),
                      w2: rng.standard_normal((H, D)), y: rng.standard_normal((N, D))}
            learning_rate = 1e-5
            losses = []
            for _t in range(50):
                loss_val, grad_w1_val, grad_w2_val = sess.run([loss, grad_w1, grad_w2],
                                                              feed_dict=values)
                values[w1] -= learning_rate * grad_w1_val
                values[w2] -= learning_rate * grad_w2_val
                losses.append(float(loss_val))
            plan = sess.plan_for([loss, grad_w1, grad_w2], values)
    assert loss_val.dtype == np.float32 and grad_w1_val.dtype == np.float32
    assert grad_w1_val.shape == (D, H) and grad_w2_val.shape == (H, D)
    assert all(np.isfinite(losses))
    assert losses[-1] < 0.5 * losses[0]
    assert sum(b < a for a, b in itertools.pairwise(losses)) >= 45
    assert len(_sweeps(plan)) == 1


def test_lecture_variables_and_minimize_version() -> None:
    """The lecture's fix: weights as Variables, updated in the graph by minimize."""
    rng = np.random.default_rng(1)
    with tf.Graph().as_default():
        N, D, H = 64, 100, 20
        x = tf.placeholder(tf.float32, shape=(N, D))
        y = tf.placeholder(tf.float32, shape=(N, D))
        w1 = tf.Variable(tf.random_normal((D, H), seed=0))
        w2 = tf.Variable(tf.random_normal((H, D), seed=1))
        h = tf.maximum(tf.matmul(x, w1), 0)
        y_pred = tf.matmul(h, w2)
        diff = y_pred - y
        loss = tf.reduce_mean(tf.reduce_sum(diff ** 2, axis=1))
        optimizer = tf.train.GradientDescentOptimizer(1e-4)
        updates = optimizer.minimize(loss)
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            values = {x: rng.standard_normal((N, D)), y: rng.standard_normal((N, D))}
            losses = []
            for _t in range(50):
                loss_val, _ = sess.run([loss, updates], feed_dict=values)
                losses.append(float(loss_val))
            assert sess.run(w1).dtype == np.float32
    assert losses[-1] < 0.5 * losses[0]


def test_the_plan_is_compiled_to_one_readable_python_function(g: tf.Graph) -> None:
    x = tf.placeholder(F64, (None, 3), name="x")
    w = tf.Variable(np.ones((3, 2)), name="w")
    loss = tf.reduce_mean(tf.reduce_sum(tf.matmul(x, w) ** 2, axis=1))
    train = tf.GradientDescentOptimizer(0.1).minimize(loss)
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        feed = {x: np.ones((4, 3))}
        plan = sess.plan_for([loss, train], feed)
        assert plan.source.startswith("def run(values, xp):")
        assert plan.source.count(".forward(") == plan.ops_run
        assert plan.source.count(".backward(") == 4  # matmul, pow, sum, mean
        # A step that fails inside the compiled function is still named by its node.
        bad = tf.placeholder(F64, (None, None), name="bad")
        product = tf.matmul(bad, w)
        with pytest.raises(ValueError, match=r"node 'MatMul.*' \(matmul with input shapes "
                                             r"\(2, 5\), \(3, 2\)\) failed"):
            sess.run(product, {bad: np.ones((2, 5))})
