"""The lecture's two-layer ReLU network, trained 50 steps four ways, must agree number by number.

Loss (the lecture's TensorFlow program): the mean over the batch of each row's summed squared
error, loss = mean_i sum_j (y_pred_ij - y_ij)^2. Engines: edu_dl eager, edu_dl static (both the
placeholder-fed program and the Variables + minimize program), TensorFlow 1.x through
tf.compat.v1 (inside its own tf.Graph, never by disabling eager execution), and PyTorch autograd.
Everything in float64; relative error below 1e-9 at every step and in the final weights.
"""

from __future__ import annotations

import numpy as np
import pytest

import edu_dl as ed
from edu_dl import graph as eg

N, D, H = 64, 1000, 100
STEPS = 50
LR = 1e-5
TOL = 1e-9


def rel_error(a: np.ndarray, b: np.ndarray) -> float:
    a, b = np.asarray(a, float), np.asarray(b, float)
    return float(np.max(np.abs(a - b)) / max(1e-300, np.max(np.abs(a) + np.abs(b))))


@pytest.fixture(scope="session")  # see tests/README.md: "Fixtures"
def data() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(2017)
    return {
        "x": rng.standard_normal((N, D)),
        "y": rng.standard_normal((N, D)),
        "w1": rng.standard_normal((D, H)),
        "w2": rng.standard_normal((H, D)),
    }


def train_numpy_by_hand(d: dict[str, np.ndarray]) -> tuple[list[float], np.ndarray, np.ndarray]:
    """The reference: NumPy forward with gradients written by hand (the lecture's first slide)."""
    x, y, w1, w2 = d["x"], d["y"], d["w1"].copy(), d["w2"].copy()
    losses = []
    for _ in range(STEPS):
        h = x @ w1
        h_relu = np.maximum(h, 0)
        diff = h_relu @ w2 - y
        losses.append(float(np.mean(np.sum(diff**2, axis=1))))
        grad_y_pred = 2 * diff / N
        grad_w2 = h_relu.T @ grad_y_pred
        grad_h = grad_y_pred @ w2.T
        grad_h[h < 0] = 0
        grad_w1 = x.T @ grad_h
        w1 -= LR * grad_w1
        w2 -= LR * grad_w2
    return losses, w1, w2


def train_eager(d: dict[str, np.ndarray]) -> tuple[list[float], np.ndarray, np.ndarray]:
    x, y = ed.tensor(d["x"]), ed.tensor(d["y"])
    w1 = ed.tensor(d["w1"].copy(), requires_grad=True)
    w2 = ed.tensor(d["w2"].copy(), requires_grad=True)
    losses = []
    for _ in range(STEPS):
        h = ed.ops.maximum(x @ w1, 0)
        diff = h @ w2 - y
        loss = (diff**2).sum(axis=1).mean()
        loss.backward()
        losses.append(loss.item())
        with ed.no_grad():
            w1.data -= LR * w1.grad.data
            w2.data -= LR * w2.grad.data
        w1.grad = w2.grad = None
    return losses, w1.numpy(), w2.numpy()


def train_static_feeds(d: dict[str, np.ndarray]) -> tuple[list[float], np.ndarray, np.ndarray]:
    """The lecture's TF 1.x program, line for line, in edu_dl.graph."""
    with eg.Graph().as_default():
        x = eg.placeholder(eg.float64, shape=(N, D))
        y = eg.placeholder(eg.float64, shape=(N, D))
        w1 = eg.placeholder(eg.float64, shape=(D, H))
        w2 = eg.placeholder(eg.float64, shape=(H, D))
        h = eg.maximum(eg.matmul(x, w1), 0)
        y_pred = eg.matmul(h, w2)
        diff = y_pred - y
        loss = eg.reduce_mean(eg.reduce_sum(diff**2, axis=1))
        grad_w1, grad_w2 = eg.gradients(loss, [w1, w2])
        with eg.Session() as sess:
            values = {x: d["x"], w1: d["w1"].copy(), w2: d["w2"].copy(), y: d["y"]}
            losses = []
            for _ in range(STEPS):
                loss_val, grad_w1_val, grad_w2_val = sess.run(
                    [loss, grad_w1, grad_w2], feed_dict=values
                )
                values[w1] -= LR * grad_w1_val
                values[w2] -= LR * grad_w2_val
                losses.append(float(loss_val))
    return losses, values[w1], values[w2]


def train_static_variables(d: dict[str, np.ndarray]) -> tuple[list[float], np.ndarray, np.ndarray]:
    """The fix from the lecture: weights live in the graph; minimize() updates them there."""
    with eg.Graph().as_default():
        x = eg.placeholder(eg.float64, shape=(N, D))
        y = eg.placeholder(eg.float64, shape=(N, D))
        w1 = eg.Variable(d["w1"])
        w2 = eg.Variable(d["w2"])
        h = eg.maximum(eg.matmul(x, w1), 0)
        y_pred = eg.matmul(h, w2)
        diff = y_pred - y
        loss = eg.reduce_mean(eg.reduce_sum(diff**2, axis=1))
        optimizer = eg.train.GradientDescentOptimizer(LR)
        updates = optimizer.minimize(loss)
        with eg.Session() as sess:
            sess.run(eg.global_variables_initializer())
            losses = []
            for _ in range(STEPS):
                loss_val, _ = sess.run([loss, updates], feed_dict={x: d["x"], y: d["y"]})
                losses.append(float(loss_val))
            w1_val, w2_val = sess.run([w1, w2])
    return losses, w1_val, w2_val


def train_tf1_feeds(d: dict[str, np.ndarray]) -> tuple[list[float], np.ndarray, np.ndarray]:
    tf = pytest.importorskip("tensorflow")
    v1 = tf.compat.v1
    with tf.Graph().as_default():
        x = v1.placeholder(tf.float64, shape=(N, D))
        y = v1.placeholder(tf.float64, shape=(N, D))
        w1 = v1.placeholder(tf.float64, shape=(D, H))
        w2 = v1.placeholder(tf.float64, shape=(H, D))
        h = tf.maximum(tf.matmul(x, w1), 0)
        y_pred = tf.matmul(h, w2)
        diff = y_pred - y
        loss = tf.reduce_mean(tf.reduce_sum(diff**2, axis=1))
        grad_w1, grad_w2 = v1.gradients(loss, [w1, w2])
        assert isinstance(loss.graph, tf.Graph) and not tf.executing_eagerly()
        with v1.Session() as sess:
            values = {x: d["x"], w1: d["w1"].copy(), w2: d["w2"].copy(), y: d["y"]}
            losses = []
            for _ in range(STEPS):
                loss_val, grad_w1_val, grad_w2_val = sess.run(
                    [loss, grad_w1, grad_w2], feed_dict=values
                )
                values[w1] -= LR * grad_w1_val
                values[w2] -= LR * grad_w2_val
                losses.append(float(loss_val))
    return losses, values[w1], values[w2]


def train_tf1_variables(d: dict[str, np.ndarray]) -> tuple[list[float], np.ndarray, np.ndarray]:
    tf = pytest.importorskip("tensorflow")
    v1 = tf.compat.v1
    with tf.Graph().as_default():
        x = v1.placeholder(tf.float64, shape=(N, D))
        y = v1.placeholder(tf.float64, shape=(N, D))
        w1 = v1.Variable(d["w1"])
        w2 = v1.Variable(d["w2"])
        h = tf.maximum(tf.matmul(x, w1), 0)
        y_pred = tf.matmul(h, w2)
        diff = y_pred - y
        loss = tf.reduce_mean(tf.reduce_sum(diff**2, axis=1))
        # TF turns a Python learning rate into a float32 tensor and casts it to float64 later:
        # 1e-5 becomes 9.99999974e-06, a 2.5e-8 relative change. Pass it as float64.
        optimizer = v1.train.GradientDescentOptimizer(tf.constant(LR, tf.float64))
        updates = optimizer.minimize(loss)
        with v1.Session() as sess:
            sess.run(v1.global_variables_initializer())
            losses = []
            for _ in range(STEPS):
                loss_val, _ = sess.run([loss, updates], feed_dict={x: d["x"], y: d["y"]})
                losses.append(float(loss_val))
            w1_val, w2_val = sess.run([w1, w2])
    return losses, w1_val, w2_val


def train_torch(d: dict[str, np.ndarray]) -> tuple[list[float], np.ndarray, np.ndarray]:
    torch = pytest.importorskip("torch")
    x, y = torch.from_numpy(d["x"]), torch.from_numpy(d["y"])
    w1 = torch.tensor(d["w1"], requires_grad=True)
    w2 = torch.tensor(d["w2"], requires_grad=True)
    losses = []
    for _ in range(STEPS):
        h = torch.maximum(x @ w1, torch.zeros((), dtype=torch.float64))
        diff = h @ w2 - y
        loss = (diff**2).sum(dim=1).mean()
        loss.backward()
        losses.append(loss.item())
        with torch.no_grad():
            w1 -= LR * w1.grad
            w2 -= LR * w2.grad
        w1.grad = w2.grad = None
    return losses, w1.detach().numpy(), w2.detach().numpy()


ENGINES = {
    "edu_dl eager": train_eager,
    "edu_dl static, feeds": train_static_feeds,
    "edu_dl static, Variables + minimize": train_static_variables,
    "tf.compat.v1, feeds": train_tf1_feeds,
    "tf.compat.v1, Variables + minimize": train_tf1_variables,
    "torch autograd": train_torch,
}


@pytest.fixture(scope="session")  # see tests/README.md: "Fixtures"
def reference(data: dict[str, np.ndarray]) -> tuple[list[float], np.ndarray, np.ndarray]:
    losses, w1, w2 = train_numpy_by_hand(data)
    assert losses[-1] < 0.05 * losses[0], "the reference run should learn"
    return losses, w1, w2


@pytest.mark.slow  # 2 s or more: make test-fast leaves it to make test
@pytest.mark.parametrize("engine", list(ENGINES))
def test_lecture_network_matches_numpy_by_hand(engine, data, reference):
    """Mean-over-batch of row-summed squared error, 50 SGD steps, float64."""
    ref_losses, ref_w1, ref_w2 = reference
    losses, w1, w2 = ENGINES[engine](data)
    assert len(losses) == STEPS
    for step, (got, want) in enumerate(zip(losses, ref_losses)):
        assert rel_error(got, want) < TOL, f"{engine}: loss differs at step {step}: {got} vs {want}"
    assert rel_error(w1, ref_w1) < TOL, f"{engine}: final w1 differs"
    assert rel_error(w2, ref_w2) < TOL, f"{engine}: final w2 differs"


def test_eager_and_static_are_bitwise_identical(data):
    """Both engines run the very same op rules in the same order on the same arrays."""
    eager = train_eager(data)
    static = train_static_feeds(data)
    assert eager[0] == static[0]
    np.testing.assert_array_equal(eager[1], static[1])
    np.testing.assert_array_equal(eager[2], static[2])


def test_tf2_eager_state_is_untouched():
    """Running tf.compat.v1 graphs above must not have switched TensorFlow 2 out of eager mode."""
    tf = pytest.importorskip("tensorflow")
    train_tf1_feeds(
        {"x": np.zeros((N, D)), "y": np.zeros((N, D)), "w1": np.zeros((D, H)),
         "w2": np.zeros((H, D))}
    )
    assert tf.executing_eagerly()
