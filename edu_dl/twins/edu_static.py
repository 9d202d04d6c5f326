"""edu_dl's static engine, written as the lecture's TF 1.x program with ``import ... as tf``.

Define the graph once (placeholders for X and Y, Variables for w1 and w2, ``minimize``), then
run it many times: ``sess.run([loss, train_op], feed_dict={x: X, y: Y})``. ``make_step`` is that
step, the one ``edu-dl bench engine`` times as "edu_dl static".
"""

from __future__ import annotations

from typing import Any

import numpy as np

from edu_dl import backend
from edu_dl import graph as tf
from edu_dl.models.spec import ADAM_BETA1, ADAM_BETA2, ADAM_EPS, ModelSpec, loss_scale
from edu_dl.twins import History, Stepper, prepare, run_steps


def make_step(spec: ModelSpec, X: np.ndarray, Y: np.ndarray, init: dict[str, np.ndarray],
              lr: float, optimizer: str = "sgd", device: str = "cpu",
              optimize: str = "auto", update: str = "minimize") -> Stepper:
    """The graph and an open Session on 'cpu' (NumPy) or 'gpu' (CuPy); a step is one run.
    ``optimize``: the Session's (fusing the plan; 'off' keeps it unfused). ``update``:
    'minimize' (the optimizer's nodes: ``assign_sub`` for SGD) or, with SGD, 'assign': the
    TensorFlow lecture's own spelling, ``w.assign(w - lr * grad)`` grouped."""
    if update not in ("minimize", "assign") or (update == "assign" and optimizer != "sgd"):
        raise ValueError(f"make_step: update must be 'minimize', or 'assign' with SGD; got "
                         f"{update!r} with {optimizer!r}")
    g = tf.Graph()
    with g.as_default():
        x = tf.placeholder(X.dtype, shape=(None, spec.D_in), name="x")
        y = tf.placeholder(Y.dtype, shape=Y.shape, name="y")
        w1 = tf.Variable(init["w1"], name="w1")
        w2 = tf.Variable(init["w2"], name="w2")
        # relu, as edu_eager's step: the benchmark then compares the two engines on equal ops.
        y_pred = tf.matmul(tf.nn.relu(tf.matmul(x, w1)), w2)
        if spec.classifier:
            loss = tf.reduce_mean(
                tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=y_pred))
        elif spec.loss == "mean_row_sum":
            loss = tf.reduce_mean(tf.reduce_sum((y_pred - y) ** 2, axis=1))  # the lecture's
        else:
            loss = tf.reduce_sum((y_pred - y) ** 2) * loss_scale(spec.loss, spec.N)
        opt: tf.Optimizer
        if update == "assign":
            grad_w1, grad_w2 = tf.gradients(loss, [w1, w2])
            assert grad_w1 is not None and grad_w2 is not None  # both reach the loss
            train_op = tf.group(w1.assign(w1 - lr * grad_w1), w2.assign(w2 - lr * grad_w2))
        elif optimizer == "sgd":
            opt = tf.train.GradientDescentOptimizer(lr)
        else:  # edu_dl's AdamOptimizer already uses PyTorch's formula
            opt = tf.train.AdamOptimizer(lr, beta1=ADAM_BETA1, beta2=ADAM_BETA2,
                                         epsilon=ADAM_EPS)
        if update == "minimize":
            train_op = opt.minimize(loss)
        init_op = tf.global_variables_initializer()
    sess = tf.Session(g, device=device, optimize=optimize)
    sess.run(init_op)
    feed = {x: backend.to_device(X, device), y: backend.to_device(Y, device)}

    def step() -> Any:
        loss_val, _ = sess.run([loss, train_op], feed_dict=feed)
        return loss_val

    def reset() -> None:
        sess.run(init_op)  # assigns every Variable its initial value again

    def weights() -> dict[str, np.ndarray]:
        return {k: backend.to_numpy(v) for k, v in zip(("w1", "w2"), sess.run([w1, w2]))}

    return Stepper(step, float, reset, weights, native=g,
                   info={"graph": g, "fed": [x.name, y.name]})


def train(spec: ModelSpec, X: np.ndarray, Y: np.ndarray, steps: int, lr: float,
          optimizer: str = "sgd", device: str = "cpu", dtype: Any = np.float64,
          weights: dict[str, np.ndarray] | None = None) -> History:
    """Full-batch training in an edu_dl Session on 'cpu' (NumPy) or 'gpu' (CuPy)."""
    X, Y, init = prepare("edu_static", spec, X, Y, steps, optimizer, device, dtype, weights)
    return run_steps("edu_static", make_step(spec, X, Y, init, lr, optimizer, device), steps)
