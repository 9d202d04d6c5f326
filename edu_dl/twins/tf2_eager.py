"""TensorFlow 2 eager: ``tf.Variable`` weights, ``tf.GradientTape``, updates by ``assign_sub``.

The optimizers are written by hand in TF ops: SGD is one line, and TF's own Adam (Keras's)
adds epsilon to sqrt(v) before the bias correction, so we write PyTorch's formula instead
(see ``edu_dl.models.spec``). ``make_step`` is shared with the ``tf.function`` twins.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import numpy as np

from edu_dl.models.spec import ADAM_BETA1, ADAM_BETA2, ADAM_EPS, ModelSpec, loss_scale
from edu_dl.twins import History, StepTimer, prepare, tf_device

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def tf_loss(spec: ModelSpec, y_pred: Any, y: Any) -> Any:
    """The spec's loss in TF ops (eager, tf.function or a TF 1.x graph alike)."""
    import tensorflow as tf

    if spec.classifier:
        return tf.reduce_mean(
            tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=y_pred))
    if spec.loss == "mean_row_sum":
        return tf.reduce_mean(tf.reduce_sum((y_pred - y) ** 2, axis=1))  # the lecture's line
    return tf.reduce_sum((y_pred - y) ** 2) * loss_scale(spec.loss, spec.N)


def adam_updates(params: list[Any], grads: list[Any], ms: list[Any], vs: list[Any], t: Any,
                 lr: float) -> list[Any]:
    """PyTorch's Adam in TF ops on Variables: returns the update ops (graph) or runs them (eager).

    w <- w - lr * (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)
    """
    import tensorflow as tf

    t_next = t.assign_add(tf.ones_like(t))
    # tf.constant, not tf.cast: tf.cast(0.999, tf.float64) rounds through float32 first.
    c1 = 1 - tf.pow(tf.constant(ADAM_BETA1, t.dtype), t_next)
    c2 = 1 - tf.pow(tf.constant(ADAM_BETA2, t.dtype), t_next)
    updates = []
    for w, g, m, v in zip(params, grads, ms, vs):
        m_next = m.assign(ADAM_BETA1 * m + (1 - ADAM_BETA1) * g)
        v_next = v.assign(ADAM_BETA2 * v + (1 - ADAM_BETA2) * (g * g))
        updates.append(w.assign_sub(lr * (m_next / c1) / (tf.sqrt(v_next / c2) + ADAM_EPS)))
    return updates


def make_step(spec: ModelSpec, X: np.ndarray, Y: np.ndarray, init: dict[str, np.ndarray],
              lr: float, optimizer: str) -> tuple[Callable[[], Any], list[Any]]:
    """(step, [w1, w2]): ``step()`` runs one training step eagerly and returns the loss."""
    import tensorflow as tf

    x, y = tf.constant(X), tf.constant(Y)
    w1, w2 = tf.Variable(init["w1"], name="w1"), tf.Variable(init["w2"], name="w2")
    params = [w1, w2]
    # Adam's state lives in Variables made here: a tf.function may not create them per call.
    ms = [tf.Variable(tf.zeros_like(w)) for w in params]
    vs = [tf.Variable(tf.zeros_like(w)) for w in params]
    t = tf.Variable(tf.zeros((), dtype=w1.dtype))

    def step() -> Any:
        with tf.GradientTape() as tape:
            loss = tf_loss(spec, tf.matmul(tf.maximum(tf.matmul(x, w1), 0), w2), y)
        grads = tape.gradient(loss, params)
        if optimizer == "sgd":
            for w, g in zip(params, grads):
                w.assign_sub(lr * g)  # lr becomes a tensor of w's dtype: float64 stays exact
        else:
            adam_updates(params, grads, ms, vs, t, lr)
        return loss

    return step, params


def run_steps(twin: str, step: Callable[[], Any], params: list[Any], steps: int) -> History:
    """Call ``step`` ``steps`` times, timing each (``.numpy()`` waits for the result)."""
    losses, timer = [], StepTimer()
    for _ in range(steps):
        timer.start()
        losses.append(float(step().numpy()))
        timer.stop()
    final = {"w1": params[0].numpy(), "w2": params[1].numpy()}
    return History(twin, losses, timer.seconds, final)


def train(spec: ModelSpec, X: np.ndarray, Y: np.ndarray, steps: int, lr: float,
          optimizer: str = "sgd", device: str = "cpu", dtype: Any = np.float64,
          weights: dict[str, np.ndarray] | None = None) -> History:
    """Full-batch training, op by op in eager mode (no tf.function)."""
    import tensorflow as tf

    X, Y, init = prepare("tf2_eager", spec, X, Y, steps, optimizer, device, dtype, weights)
    with tf.device(tf_device(device)):
        step, params = make_step(spec, X, Y, init, lr, optimizer)
        history = run_steps("tf2_eager", step, params, steps)
    history.info["executing_eagerly"] = tf.executing_eagerly()
    return history
