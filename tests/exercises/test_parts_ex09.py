"""Exercise 9 (TensorFlow): the solutions pass every case, typical mistakes get specific messages.

The solution functions are taken from solutions/09_tensorflow.ipynb itself (its setup and solution
cells are executed), so these tests follow the notebook.
"""

from __future__ import annotations

from pathlib import Path

import nbformat
import numpy as np
import pytest
from fixtures.exercise_helpers import course_module, course_part, run_check, solution_namespace

from edu_dl.grading.checking import VISIBLE_SEED

pytestmark = pytest.mark.usefixtures("in_solutions")  # check() finds ./parts there

NOTEBOOK = Path(__file__).resolve().parents[2] / "solutions" / "09_tensorflow.ipynb"
PART_FUNCTIONS = {
    "ex09.tf1_minibatch": "train_tf1_minibatch",
    "ex09.tf1_loss_after_update": "train_tf1_loss_after_update",
    "ex09.tape_momentum": "train_tf2_momentum",
    "ex09.tf_function_decay": "train_tf_function_decay",
    "ex09.feed_bytes": "feed_bytes",
}


@pytest.fixture(scope="session")  # see tests/README.md: "Fixtures"
def sol():
    """The notebook's setup and solution cells, executed: its functions by name."""
    return solution_namespace("09_tensorflow.ipynb")


run = run_check


def test_points_match_the_notebook():
    nb = nbformat.read(NOTEBOOK, as_version=4)
    points = {c.source.split('"')[1]: c.metadata.nbgrader["points"] for c in nb.cells
              if c.metadata.get("nbgrader", {}).get("grade")}
    assert points == {pid: course_part(pid).points for pid in PART_FUNCTIONS}




@pytest.mark.slow  # 2 s or more: make test-fast leaves it to make test
def test_solutions_pass_through_check(capsys, sol):
    for part_id, name in PART_FUNCTIONS.items():
        ok, out = run(capsys, part_id, sol[name], hidden=True)
        assert ok, out
        assert out == f"✓ {part_id}: 4 hidden cases passed\n"


# ----------------------------------------------------------------------------- typical mistakes


def minibatch_program(X, y, w1_init, w2_init, lr, batch_size, num_epochs, mistake=None):
    """Part 1, right or with a mistake: "rebuilt" (a graph with fixed shapes per batch),
    "fixed_shape" (one graph whose placeholders have batch_size rows), "drop_last", "divided"
    (each batch's error divided by batch_size), "whole" (one step per epoch on all of X), "sum"
    (the batch's error summed)."""
    import tensorflow as tf

    v1 = tf.compat.v1

    def build(rows):
        x_ph = v1.placeholder(tf.float64, (rows, X.shape[1]))
        y_ph = v1.placeholder(tf.float64, (rows, y.shape[1]))
        w1, w2 = v1.placeholder(tf.float64, w1_init.shape), v1.placeholder(tf.float64,
                                                                            w2_init.shape)
        errors = tf.reduce_sum((tf.maximum(x_ph @ w1, 0) @ w2 - y_ph) ** 2, axis=1)
        loss = {"divided": tf.reduce_sum(errors) / batch_size,
                "sum": tf.reduce_sum(errors)}.get(mistake, tf.reduce_mean(errors))
        return (x_ph, y_ph, w1, w2), loss, v1.gradients(loss, [w1, w2])

    size = len(X) if mistake == "whole" else batch_size
    starts = range(0, len(X), size)
    if mistake == "drop_last":
        starts = [s for s in starts if s + size <= len(X)]
    weights = [w1_init, w2_init]
    losses = []
    graph = tf.Graph()
    with graph.as_default():
        built = build(batch_size if mistake == "fixed_shape" else None)
    for _ in range(num_epochs):
        for start in starts:
            if mistake == "rebuilt":
                graph = tf.Graph()
                with graph.as_default():
                    built = build(len(X[start:start + size]))
            (x_ph, y_ph, w1, w2), loss, grads = built
            with v1.Session(graph=graph) as sess:
                feed = {x_ph: X[start:start + size], y_ph: y[start:start + size],
                        w1: weights[0], w2: weights[1]}
                loss_val, g1, g2 = sess.run([loss, *grads], feed)
            weights = [weights[0] - lr * g1, weights[1] - lr * g2]
            losses.append(loss_val)
    return np.array(losses)


@pytest.mark.parametrize(("mistake", "hint"), [
    (None, None),
    ("rebuilt", "hint: your training runs used more than one graph"),
    ("drop_last", "hint: the last, shorter batch of each epoch is missing"),
    ("divided", "hint: the short batch's loss was divided by batch_size"),
    ("whole", "hint: one step per epoch on all of X is the lecture's full-batch loop"),
    ("sum", "hint: you summed over the whole batch"),
])
def test_minibatch_mistakes(capsys, mistake, hint):
    ok, out = run(capsys, "ex09.tf1_minibatch",
                  lambda *a: minibatch_program(*a, mistake=mistake))
    if hint is None:
        assert ok and "hint" not in out, out
        return
    assert not ok and hint in out, out
    assert out.count("hint:") == 1, out  # no other mistake's hint fires on it
    if mistake == "rebuilt":  # case 1: 5 rows in batches of 2, 2 epochs: 6 graphs
        assert "output 1 (graphs built): expected 1, got 6" in out


def test_a_fixed_batch_dimension_is_named(capsys):
    ok, out = run(capsys, "ex09.tf1_minibatch",
                  lambda *a: minibatch_program(*a, mistake="fixed_shape"))
    assert not ok and "a placeholder's shape fixed the batch size" in out, out
    assert "Cannot feed value of shape (1, 6)" in out, out


def test_minibatch_cases_and_oracle():
    """Visible cases end their epochs with a short batch but one; hidden ones take a batch of one
    row and one larger than X; the oracle agrees with the NumPy replay, and with batch_size >= N
    it is the full-batch oracle, one step per epoch."""
    ex09 = course_module("ex09")
    visible = ex09._minibatch_cases(np.random.default_rng(VISIBLE_SEED), False)
    assert [len(x) % b != 0 for x, _, _, _, _, b, _ in visible] == [True, True, False]
    for seed in range(10):
        hidden = ex09._minibatch_cases(np.random.default_rng(seed), True)
        assert hidden[0][5] == 1 and hidden[1][5] > len(hidden[1][0])
        for args in hidden:
            x, y, w1, w2, lr, batch_size, epochs = args
            losses = ex09._edu_dl_minibatch_losses(*args)
            assert len(losses) == epochs * -(-len(x) // batch_size)
            assert np.all(np.isfinite(losses))
            assert np.allclose(ex09.numpy_minibatch_losses(*args), losses, rtol=1e-10)
            if batch_size >= len(x):
                assert np.allclose(losses, ex09._edu_dl_losses(x, y, w1, w2, lr, epochs),
                                   rtol=1e-12)


def after_update_program(X, y, w1_init, w2_init, lr, num_steps, mistake=None):
    """Part 2, right or with a mistake: "before" (the loss fetched beside the update: the loss
    before it), "racy" (the new loss's reads unordered with the update), "two_runs" (the update,
    then the new loss in a run of its own), "float32_lr" (GradientDescentOptimizer(lr)), or
    "minimize" (right, with an optimizer)."""
    import tensorflow as tf

    v1 = tf.compat.v1
    with tf.Graph().as_default():
        x_ph, y_ph = v1.placeholder(tf.float64, X.shape), v1.placeholder(tf.float64, y.shape)
        w1, w2 = v1.Variable(w1_init), v1.Variable(w2_init)

        def loss_at(a, b):
            return tf.reduce_mean(tf.reduce_sum((tf.maximum(x_ph @ a, 0) @ b - y_ph) ** 2, 1))

        loss = loss_at(w1, w2)
        if mistake in ("float32_lr", "minimize"):
            rate = lr if mistake == "float32_lr" else tf.constant(lr, tf.float64)
            update = v1.train.GradientDescentOptimizer(rate).minimize(loss)
        else:
            g1, g2 = v1.gradients(loss, [w1, w2])
            update = tf.group(w1.assign_sub(lr * g1), w2.assign_sub(lr * g2))
        if mistake in ("racy", "two_runs"):
            new_loss = loss_at(w1, w2)
        else:
            with tf.control_dependencies([update]):
                new_loss = loss_at(w1, w2)  # resource variables: new reads, ordered
        feed = {x_ph: X, y_ph: y}
        with v1.Session() as sess:
            sess.run(v1.global_variables_initializer())
            losses = []
            for _ in range(num_steps):
                if mistake == "before":
                    losses.append(sess.run([loss, update], feed)[0])
                elif mistake == "racy":
                    losses.append(sess.run([new_loss, update], feed)[0])
                elif mistake == "two_runs":
                    sess.run(update, feed)
                    losses.append(sess.run(new_loss, feed))
                else:
                    losses.append(sess.run(new_loss, feed))
    return np.array(losses)


@pytest.mark.parametrize(("mistake", "hint"), [
    (None, None),
    ("minimize", None),
    ("before", "hint: these are the losses BEFORE each update"),
    ("racy", "hint: in some runs the loss read w1 or w2 with nothing ordering that read"),
    ("two_runs", "hint: some runs fetched a value without updating any Variable"),
    ("float32_lr", "hint: your learning rate became float32"),
])
def test_loss_after_update_mistakes(capsys, mistake, hint):
    ok, out = run(capsys, "ex09.tf1_loss_after_update",
                  lambda *a: after_update_program(*a, mistake=mistake))
    if hint is None:
        assert ok and "hint" not in out, out
        return
    assert not ok and hint in out, out
    assert out.count("hint:") == 1, out
    if mistake == "two_runs":  # case 1 has 5 steps, each reading the loss in a run of its own
        assert "output 1 (runs that updated nothing): expected 0, got 5" in out


def test_loss_after_update_oracle():
    """The oracle's losses are the full-batch oracle's, one step later; the NumPy replay of the
    hints agrees with it."""
    part, ex09 = course_part("ex09.tf1_loss_after_update"), course_module("ex09")
    for args in part.cases(np.random.default_rng(4), True):
        losses, no_update, unordered = part.expected(*args)
        assert (no_update, unordered) == (0, 0)
        assert np.allclose(losses[:-1], ex09._edu_dl_losses(*args)[1:], rtol=1e-12)
        assert np.allclose(ex09._replay_after(args), losses, rtol=1e-10)


def test_eager_code_is_not_a_tf1_program(capsys, sol):
    for part_id in ("ex09.tf1_minibatch", "ex09.tf1_loss_after_update"):
        ok, out = run(capsys, part_id, lambda *a: sol["train_tf2_momentum"](*a[:5], 2, 0.0))
        assert not ok
        assert "failed: your function never ran a tf.compat.v1.Session" in out


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
    ok, out = run(capsys, "ex09.tape_momentum", lambda *a: tape_program(*a, **kwargs))
    assert not ok and hint in out


@pytest.mark.parametrize(("velocity", "hint"), [
    ("kept", None),
    ("reset", "hint: these are plain gradient descent's losses"),
    ("dampened", "hint: the velocity adds the whole gradient, not (1 - momentum) of it"),
    ("stale", "hint: the weights moved with the velocity from before this step's gradient"),
])
def test_momentum_mistakes(capsys, velocity, hint):
    ok, out = run(capsys, "ex09.tape_momentum", lambda *a: tape_program(*a, velocity=velocity))
    if hint is None:
        assert ok and "hint" not in out, out
        return
    assert not ok and hint in out, out
    assert out.count("hint:") == 1, out  # no other mistake's hint fires on it


def test_momentum_oracle_is_edu_dl_optim():
    """The momentum oracle (edu_dl.optim.SGD) with momentum 0 is the plain oracle, with a momentum
    it differs from the third loss on, and the NumPy replay of the hints agrees with it."""
    ex09 = course_module("ex09")
    for args in ex09._momentum_cases(np.random.default_rng(3), True):
        plain = ex09._edu_dl_losses(*args[:6])
        assert np.allclose(ex09._edu_dl_momentum_losses(*args[:6], 0.0), plain, rtol=1e-12)
        with_momentum = ex09._edu_dl_momentum_losses(*args)
        assert np.allclose(with_momentum[:2], plain[:2], rtol=1e-12)
        if args[5] > 2:
            assert not np.allclose(with_momentum[2:], plain[2:], rtol=1e-9)
        assert np.allclose(ex09._replay_momentum(args), with_momentum, rtol=1e-10)


def test_tf1_code_is_not_a_tape(capsys, sol):
    ok, out = run(capsys, "ex09.tape_momentum",
                  lambda *a: sol["train_tf1_loss_after_update"](*a[:6]))
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
    ok, out = run(capsys, "ex09.tf_function_decay", lambda *a: decaying(*a, mistake=mistake))
    if hint is None:
        assert ok and "hint" not in out, out
        return
    assert not ok and hint in out, out
    if mistake == "argument":
        assert "output 1 (tracing count): expected 1, got 5" in out


def test_decay_zero_is_the_constant_rate():
    """The decaying oracle with decay = 0 is the other parts' oracle; with a decay it differs."""
    ex09 = course_module("ex09")
    for args in ex09._decay_cases(np.random.default_rng(2), True):
        constant = ex09._edu_dl_losses(*args[:6])
        assert np.allclose(ex09._edu_dl_losses(*args[:6], 0.0), constant, rtol=0, atol=0)
        if args[5] > 1:
            assert not np.allclose(ex09._edu_dl_losses(*args), constant, rtol=1e-9)
        assert np.allclose(ex09.numpy_losses(*args), ex09._edu_dl_losses(*args), rtol=1e-10)


def test_tf_function_must_return_the_function(capsys, sol):
    plain = sol["train_tf2_momentum"]
    ok, out = run(capsys, "ex09.tf_function_decay", lambda *a: plain(*a[:6], 0.0))
    assert not ok and "return two things: (losses, train_step)" in out
    ok, out = run(capsys, "ex09.tf_function_decay", lambda *a: (plain(*a[:6], 0.0), None))
    assert not ok and "not a tf.function" in out


# --------------------------------------------------------------------------- bytes per step


def test_feed_bytes_without_the_loss(capsys: pytest.CaptureFixture[str], sol) -> None:
    feed_bytes = sol["feed_bytes"]  # executed before check() times a call
    def no_loss(n, d, h, d_out, size):
        fed_in, fed_out, kept_in, _ = feed_bytes(n, d, h, d_out, size)
        return fed_in, fed_out - size, kept_in, 0

    ok, out = run(capsys, "ex09.feed_bytes", no_loss)
    assert not ok
    assert "output 1 (feed_out): expected 800004, got 800000" in out
    assert "hint: the loss is fetched too" in out


def test_feed_bytes_in_elements(capsys: pytest.CaptureFixture[str]) -> None:
    ok, out = run(capsys, "ex09.feed_bytes",
                  lambda n, d, h, o, s: (n * d + n * o + d * h + h * o, 1 + d * h + h * o,
                                         n * d + n * o, 1))
    assert not ok and "hint: count bytes, not elements" in out
