"""Exercise 6 (TensorFlow): the solutions pass every case, typical mistakes get specific messages.

The solution functions are taken from solutions/06_tensorflow.ipynb itself (its setup and solution
cells are executed), so these tests follow the notebook.
"""

from __future__ import annotations

from pathlib import Path

import nbformat
import numpy as np
import pytest
from fixtures.exercise_helpers import course_module, course_part, run_check, solution_namespace

pytestmark = pytest.mark.usefixtures("in_solutions")  # check() finds ./parts there

NOTEBOOK = Path(__file__).resolve().parents[2] / "solutions" / "06_tensorflow.ipynb"
PART_FUNCTIONS = {
    "ex06.tf1_graph": "train_tf1_graph",
    "ex06.tf1_variables": "train_tf1_variables",
    "ex06.tape_momentum": "train_tf2_momentum",
    "ex06.tf_function_decay": "train_tf_function_decay",
}


@pytest.fixture(scope="module")
def sol():
    """The notebook's setup and solution cells, executed: its functions by name."""
    return solution_namespace("06_tensorflow.ipynb")


run = run_check


def test_points_match_the_notebook():
    nb = nbformat.read(NOTEBOOK, as_version=4)
    points = {c.source.split('"')[1]: c.metadata.nbgrader["points"] for c in nb.cells
              if c.metadata.get("nbgrader", {}).get("grade")}
    assert points == {pid: course_part(pid).points for pid in PART_FUNCTIONS}


def test_cases_never_give_data_a_weight_shape():
    part = course_part("ex06.tf1_variables")
    for seed in range(20):
        for x, y, w1, w2, lr, steps in part.cases(np.random.default_rng(seed), True):
            assert {x.shape, y.shape}.isdisjoint({w1.shape, w2.shape})
            losses = part.expected(x, y, w1, w2, lr, steps)[0]
            assert np.all(np.isfinite(losses)) and losses[-1] <= losses[0] * (1 + 1e-12)


def test_solutions_pass_through_check(capsys, sol):
    for part_id, name in PART_FUNCTIONS.items():
        ok, out = run(capsys, part_id, sol[name], hidden=True)
        assert ok, out
        assert out == f"✓ {part_id}: 4 hidden cases passed\n"


# ----------------------------------------------------------------------------- typical mistakes


def tf1_program(X, y, w1_init, w2_init, lr, num_steps, reduce="batch_mean"):
    """Part 1's program with the loss reduced the wrong way."""
    import tensorflow as tf

    v1 = tf.compat.v1
    with tf.Graph().as_default():
        x_ph, y_ph = v1.placeholder(tf.float64, X.shape), v1.placeholder(tf.float64, y.shape)
        w1, w2 = v1.placeholder(tf.float64, w1_init.shape), v1.placeholder(tf.float64,
                                                                            w2_init.shape)
        diff = tf.matmul(tf.maximum(tf.matmul(x_ph, w1), 0), w2) - y_ph
        loss = {"batch_mean": tf.reduce_mean(tf.reduce_sum(diff ** 2, axis=1)),
                "sum": tf.reduce_sum(diff ** 2), "mean": tf.reduce_mean(diff ** 2)}[reduce]
        grads = v1.gradients(loss, [w1, w2])
        with v1.Session() as sess:
            values = {x_ph: X, y_ph: y, w1: w1_init, w2: w2_init}
            losses = []
            for _ in range(num_steps):
                loss_val, g1, g2 = sess.run([loss, *grads], feed_dict=values)
                values[w1], values[w2] = values[w1] - lr * g1, values[w2] - lr * g2
                losses.append(loss_val)
    return losses


def test_summed_or_averaged_loss_gets_the_reduction_hint(capsys):
    ok, out = run(capsys, "ex06.tf1_graph", lambda *a: tf1_program(*a, reduce="sum"))
    assert not ok
    assert "case 1 of 3 (X (4, 6), y (4, 3), w1 (6, 5), w2 (5, 3), lr=" in out
    assert "5 of 5 entries differ" in out and "[0]: expected" in out
    assert "hint: you summed over the whole batch" in out
    ok, out = run(capsys, "ex06.tf1_graph", lambda *a: tf1_program(*a, reduce="mean"))
    assert not ok and "hint: you averaged over every entry" in out


def test_eager_code_is_not_a_tf1_program(capsys, sol):
    ok, out = run(capsys, "ex06.tf1_graph", lambda *a: sol["train_tf2_momentum"](*a, 0.0))
    assert not ok
    assert "failed: your function never ran a tf.compat.v1.Session" in out


def test_fed_weights_are_counted_in_the_variables_part(capsys, sol):
    ok, out = run(capsys, "ex06.tf1_variables", sol["train_tf1_graph"])
    assert not ok
    # case 1: w1 (6, 5) and w2 (5, 3) fed and both gradients fetched, 5 steps: 2 * 45 * 5 values
    assert "output 1 (weight values fed or fetched in the training steps): expected 0, got 450" \
        in out
    assert "hint: weights still travel between Python and the session" in out


def test_fetching_gradients_next_to_minimize_is_counted(capsys):
    """The source's fault: its loop still fetches the gradients the optimizer applies."""
    import tensorflow as tf

    v1 = tf.compat.v1

    def fetches_grads(X, y, w1_init, w2_init, lr, num_steps):
        with tf.Graph().as_default():
            x_ph, y_ph = v1.placeholder(tf.float64, X.shape), v1.placeholder(tf.float64, y.shape)
            w1, w2 = v1.Variable(w1_init), v1.Variable(w2_init)
            diff = tf.matmul(tf.maximum(tf.matmul(x_ph, w1), 0), w2) - y_ph
            loss = tf.reduce_mean(tf.reduce_sum(diff ** 2, axis=1))
            grads = v1.gradients(loss, [w1, w2])
            update = v1.train.GradientDescentOptimizer(tf.constant(lr, tf.float64)).minimize(loss)
            with v1.Session() as sess:
                sess.run(v1.global_variables_initializer())
                return [sess.run([loss, update, *grads], {x_ph: X, y_ph: y})[0]
                        for _ in range(num_steps)]

    ok, out = run(capsys, "ex06.tf1_variables", fetches_grads)
    assert not ok and "expected 0, got 225" in out and "fetch only the loss" in out


def test_float32_learning_rate_gets_its_own_hint(capsys):
    import tensorflow as tf

    v1 = tf.compat.v1

    def minimize_float32_lr(X, y, w1_init, w2_init, lr, num_steps):
        with tf.Graph().as_default():
            x_ph, y_ph = v1.placeholder(tf.float64, X.shape), v1.placeholder(tf.float64, y.shape)
            w1, w2 = v1.Variable(w1_init), v1.Variable(w2_init)
            diff = tf.matmul(tf.maximum(tf.matmul(x_ph, w1), 0), w2) - y_ph
            loss = tf.reduce_mean(tf.reduce_sum(diff ** 2, axis=1))
            update = v1.train.GradientDescentOptimizer(lr).minimize(loss)
            with v1.Session() as sess:
                sess.run(v1.global_variables_initializer())
                return [sess.run([loss, update], {x_ph: X, y_ph: y})[0] for _ in range(num_steps)]

    ok, out = run(capsys, "ex06.tf1_variables", minimize_float32_lr)
    assert not ok
    assert "output 0 (losses)" in out and "hint: your learning rate became float32" in out


def tape_program(X, y, w1_init, w2_init, lr, num_steps, momentum, relu=True, after=False,
                 dtype="float64", velocity="kept"):
    """The momentum tape loop, right or with a mistake: no ReLU, the loss after the update,
    float32, or a velocity "reset" each step, "dampened" ((1 - momentum) of the gradient) or
    "stale" (the step taken before the velocity's update)."""
    import tensorflow as tf

    w1 = tf.Variable(w1_init.astype(dtype))
    w2 = tf.Variable(w2_init.astype(dtype))
    x_t, y_t = tf.constant(X.astype(dtype)), tf.constant(y.astype(dtype))
    v1, v2 = np.zeros_like(w1_init, dtype), np.zeros_like(w2_init, dtype)
    gain = 1.0 - momentum if velocity == "dampened" else 1.0
    losses = []
    for _ in range(num_steps):
        with tf.GradientTape() as tape:
            h = x_t @ w1
            h = tf.maximum(h, 0) if relu else h
            loss = tf.reduce_mean(tf.reduce_sum((h @ w2 - y_t) ** 2, axis=1))
        g1, g2 = (g.numpy() for g in tape.gradient(loss, [w1, w2]))
        if velocity == "reset":
            v1, v2 = np.zeros_like(v1), np.zeros_like(v2)
        if velocity == "stale":
            w1.assign_sub(lr * v1)
            w2.assign_sub(lr * v2)
        v1, v2 = momentum * v1 + gain * g1, momentum * v2 + gain * g2
        if velocity != "stale":
            w1.assign_sub(lr * v1)
            w2.assign_sub(lr * v2)
        if after:
            h = tf.maximum(x_t @ w1, 0)
            loss = tf.reduce_mean(tf.reduce_sum((h @ w2 - y_t) ** 2, axis=1))
        losses.append(float(loss.numpy()))
    return losses


@pytest.mark.parametrize(("kwargs", "hint"), [
    ({"relu": False}, "hint: apply the ReLU to the hidden layer"),
    ({"after": True}, "hint: record each step's loss BEFORE its update"),
    ({"dtype": "float32"}, "hint: close, but only to float32 precision"),
])
def test_tape_mistakes(capsys, kwargs, hint):
    ok, out = run(capsys, "ex06.tape_momentum", lambda *a: tape_program(*a, **kwargs))
    assert not ok and hint in out


@pytest.mark.parametrize(("velocity", "hint"), [
    ("kept", None),
    ("reset", "hint: these are plain gradient descent's losses"),
    ("dampened", "hint: the velocity adds the whole gradient, not (1 - momentum) of it"),
    ("stale", "hint: the weights moved with the velocity from before this step's gradient"),
])
def test_momentum_mistakes(capsys, velocity, hint):
    ok, out = run(capsys, "ex06.tape_momentum", lambda *a: tape_program(*a, velocity=velocity))
    if hint is None:
        assert ok and "hint" not in out, out
        return
    assert not ok and hint in out, out
    assert out.count("hint:") == 1, out  # no other mistake's hint fires on it


def test_momentum_oracle_is_edu_dl_optim():
    """The momentum oracle (edu_dl.optim.SGD) with momentum 0 is the plain oracle, with a momentum
    it differs from the third loss on, and the NumPy replay of the hints agrees with it."""
    ex06 = course_module("ex06")
    for args in ex06._momentum_cases(np.random.default_rng(3), True):
        plain = ex06._edu_dl_losses(*args[:6])
        assert np.allclose(ex06._edu_dl_momentum_losses(*args[:6], 0.0), plain, rtol=1e-12)
        with_momentum = ex06._edu_dl_momentum_losses(*args)
        assert np.allclose(with_momentum[:2], plain[:2], rtol=1e-12)
        if args[5] > 2:
            assert not np.allclose(with_momentum[2:], plain[2:], rtol=1e-9)
        assert np.allclose(ex06._replay_momentum(args), with_momentum, rtol=1e-10)


def test_tf1_code_is_not_a_tape(capsys, sol):
    ok, out = run(capsys, "ex06.tape_momentum", lambda *a: sol["train_tf1_variables"](*a[:6]))
    assert not ok and "never called tape.gradient" in out


def decaying(X, y, w1_init, w2_init, lr, num_steps, decay, mistake=None):
    """The decaying-rate tf.function, right or with a mistake: "argument" (the rate passed as a
    Python float: a new trace per step), "frozen" (a Python rate read from the enclosing function:
    the trace keeps its first value) or "from_one" (t counted from 1)."""
    import tensorflow as tf

    w1, w2 = tf.Variable(w1_init), tf.Variable(w2_init)
    rate = tf.Variable(lr, dtype=tf.float64)
    python_rate = lr

    @tf.function
    def step(x, y, given_rate):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.reduce_sum(
                (tf.maximum(x @ w1, 0) @ w2 - y) ** 2, axis=1))
        g1, g2 = tape.gradient(loss, [w1, w2])
        used = {"argument": given_rate, "frozen": python_rate}.get(mistake, rate)
        w1.assign_sub(used * g1)
        w2.assign_sub(used * g2)
        return loss

    losses = []
    for t in range(num_steps):
        python_rate = lr / (1 + decay * (t + (mistake == "from_one")))
        rate.assign(python_rate)
        given = python_rate if mistake == "argument" else 0.0
        losses.append(step(tf.constant(X), tf.constant(y), given).numpy())
    return losses, step


@pytest.mark.parametrize(("mistake", "hint"), [
    (None, None),
    ("argument", "hint: traced more than once"),
    ("frozen", "hint: the rate never decayed: a Python number the step reads is frozen"),
    ("from_one", "hint: the first step is step t = 0"),
])
def test_decaying_rate_mistakes(capsys, mistake, hint):
    ok, out = run(capsys, "ex06.tf_function_decay", lambda *a: decaying(*a, mistake=mistake))
    if hint is None:
        assert ok and "hint" not in out, out
        return
    assert not ok and hint in out, out
    if mistake == "argument":
        assert "output 1 (tracing count): expected 1, got 5" in out


def test_decay_zero_is_the_constant_rate():
    """The decaying oracle with decay = 0 is the other parts' oracle; with a decay it differs."""
    ex06 = course_module("ex06")
    for args in ex06._decay_cases(np.random.default_rng(2), True):
        constant = ex06._edu_dl_losses(*args[:6])
        assert np.allclose(ex06._edu_dl_losses(*args[:6], 0.0), constant, rtol=0, atol=0)
        if args[5] > 1:
            assert not np.allclose(ex06._edu_dl_losses(*args), constant, rtol=1e-9)
        assert np.allclose(ex06.numpy_losses(*args), ex06._edu_dl_losses(*args), rtol=1e-10)


def test_tf_function_must_return_the_function(capsys, sol):
    plain = sol["train_tf2_momentum"]
    ok, out = run(capsys, "ex06.tf_function_decay", lambda *a: plain(*a[:6], 0.0))
    assert not ok and "return two things: (losses, train_step)" in out
    ok, out = run(capsys, "ex06.tf_function_decay", lambda *a: (plain(*a[:6], 0.0), None))
    assert not ok and "not a tf.function" in out


