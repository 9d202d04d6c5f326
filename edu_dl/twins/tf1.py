"""TensorFlow 1.x graphs through ``tf.compat.v1``: build a ``tf.Graph``, run a ``Session``.

Two versions, as in the lecture:

- ``train_feed``: w1 and w2 are placeholders fed from NumPy every step, ``tf.gradients`` gives
  the gradients and NumPy updates the weights (on a GPU: a host<->device copy every step);
- ``train``: w1 and w2 are Variables that stay in the graph; SGD is
  ``GradientDescentOptimizer(...).minimize(loss)``, Adam is PyTorch's formula with ``assign``
  (TF 1.x's AdamOptimizer adds epsilon to sqrt(v) before the bias correction: different numbers).

Eager execution is never disabled for the process: the graph is built inside
``with graph.as_default()`` and run by a ``tf.compat.v1.Session`` on that graph.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from edu_dl.models import spec as models
from edu_dl.models.spec import ModelSpec
from edu_dl.twins import History, StepTimer, prepare, tf_device
from edu_dl.twins.tf2_eager import adam_updates, tf_loss


def _inputs(tf: Any, spec: ModelSpec, X: np.ndarray, Y: np.ndarray) -> tuple[Any, Any]:
    v1 = tf.compat.v1
    x = v1.placeholder(tf.as_dtype(X.dtype), shape=(None, spec.D_in), name="x")
    y = v1.placeholder(tf.as_dtype(Y.dtype), shape=(None, *Y.shape[1:]), name="y")
    return x, y


def train_feed(spec: ModelSpec, X: np.ndarray, Y: np.ndarray, steps: int, lr: float,
               optimizer: str = "sgd", device: str = "cpu", dtype: Any = np.float64,
               weights: dict[str, np.ndarray] | None = None) -> History:
    """The lecture's first program: everything fed, ``sess.run([loss, grads], feed_dict)``."""
    import tensorflow as tf

    X, Y, init = prepare("tf1_feed", spec, X, Y, steps, optimizer, device, dtype, weights)
    v1 = tf.compat.v1
    graph = tf.Graph()
    with graph.as_default(), tf.device(tf_device(device)):
        x, y = _inputs(tf, spec, X, Y)
        w1 = v1.placeholder(tf.as_dtype(X.dtype), shape=(spec.D_in, spec.H), name="w1")
        w2 = v1.placeholder(tf.as_dtype(X.dtype), shape=(spec.H, spec.D_out), name="w2")
        h = tf.maximum(tf.matmul(x, w1), 0)
        loss = tf_loss(spec, tf.matmul(h, w2), y)
        grad_w1, grad_w2 = tf.gradients(loss, [w1, w2])
    values = {x: X, y: Y, w1: init["w1"].copy(), w2: init["w2"].copy()}
    adam = models.adam_init(np, [values[w1], values[w2]])
    losses, timer = [], StepTimer()
    with v1.Session(graph=graph) as sess:
        for _ in range(steps):
            timer.start()
            loss_val, g1, g2 = sess.run([loss, grad_w1, grad_w2], feed_dict=values)
            if optimizer == "sgd":
                models.sgd_update([values[w1], values[w2]], [g1, g2], lr)
            else:
                models.adam_update(np, [values[w1], values[w2]], [g1, g2], adam, lr)
            losses.append(float(loss_val))
            timer.stop()
    return History("tf1_feed", losses, timer.seconds, {"w1": values[w1], "w2": values[w2]},
                   native=graph, info={"graph": graph, "fed": sorted(t.name for t in values)})


def train(spec: ModelSpec, X: np.ndarray, Y: np.ndarray, steps: int, lr: float,
          optimizer: str = "sgd", device: str = "cpu", dtype: Any = np.float64,
          weights: dict[str, np.ndarray] | None = None) -> History:
    """The lecture's fix: Variables in the graph, ``sess.run([loss, updates], {x, y})``."""
    import tensorflow as tf

    X, Y, init = prepare("tf1", spec, X, Y, steps, optimizer, device, dtype, weights)
    v1 = tf.compat.v1
    tf_dtype = tf.as_dtype(X.dtype)
    graph = tf.Graph()
    with graph.as_default(), tf.device(tf_device(device)):
        x, y = _inputs(tf, spec, X, Y)
        w1 = v1.Variable(init["w1"], name="w1")
        w2 = v1.Variable(init["w2"], name="w2")
        loss = tf_loss(spec, tf.matmul(tf.maximum(tf.matmul(x, w1), 0), w2), y)
        if optimizer == "sgd":
            # A Python lr would become a float32 tensor inside the optimizer: float64 needs this.
            opt = v1.train.GradientDescentOptimizer(tf.constant(lr, tf_dtype))
            updates = opt.minimize(loss)
        else:
            params = [w1, w2]
            ms = [v1.Variable(np.zeros_like(init[k])) for k in models.WEIGHT_NAMES]
            vs = [v1.Variable(np.zeros_like(init[k])) for k in models.WEIGHT_NAMES]
            t = v1.Variable(tf.zeros((), dtype=tf_dtype))
            updates = tf.group(*adam_updates(params, tf.gradients(loss, params), ms, vs, t, lr))
        init_op = v1.global_variables_initializer()
    feed = {x: X, y: Y}
    losses, timer = [], StepTimer()
    with v1.Session(graph=graph) as sess:
        sess.run(init_op)
        for _ in range(steps):
            timer.start()
            loss_val, _ = sess.run([loss, updates], feed_dict=feed)
            losses.append(float(loss_val))
            timer.stop()
        final = dict(zip(("w1", "w2"), sess.run([w1, w2])))
    return History("tf1", losses, timer.seconds, final, native=graph,
                   info={"graph": graph, "fed": sorted(t.name for t in feed)})
