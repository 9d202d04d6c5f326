"""TensorFlow 2 ``tf.function``: the eager step of ``tf2_eager`` traced once into a graph and
reused every step; ``train_xla`` also compiles that graph with XLA (``jit_compile=True``).

``History.info['tracing_count']`` is ``experimental_get_tracing_count()``: 1 means traced once.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from edu_dl.models.spec import ModelSpec
from edu_dl.twins import History, prepare, tf_device
from edu_dl.twins.tf2_eager import make_step, run_steps


def _train(twin: str, jit_compile: bool, spec: ModelSpec, X: np.ndarray, Y: np.ndarray,
           steps: int, lr: float, optimizer: str, device: str, dtype: Any,
           weights: dict[str, np.ndarray] | None) -> History:
    import tensorflow as tf

    X, Y, init = prepare(twin, spec, X, Y, steps, optimizer, device, dtype, weights)
    with tf.device(tf_device(device)):
        eager_step, params = make_step(spec, X, Y, init, lr, optimizer)
        step = tf.function(eager_step, jit_compile=jit_compile)
        history = run_steps(twin, step, params, steps)
    history.native = step
    history.info["tracing_count"] = step.experimental_get_tracing_count()
    history.info["jit_compile"] = jit_compile
    return history


def train(spec: ModelSpec, X: np.ndarray, Y: np.ndarray, steps: int, lr: float,
          optimizer: str = "sgd", device: str = "cpu", dtype: Any = np.float64,
          weights: dict[str, np.ndarray] | None = None) -> History:
    """Full-batch training with the step in a ``tf.function``."""
    return _train("tf_function", False, spec, X, Y, steps, lr, optimizer, device, dtype,
                  weights)


def train_xla(spec: ModelSpec, X: np.ndarray, Y: np.ndarray, steps: int, lr: float,
              optimizer: str = "sgd", device: str = "cpu", dtype: Any = np.float64,
              weights: dict[str, np.ndarray] | None = None) -> History:
    """Full-batch training with the step in ``tf.function(jit_compile=True)`` (XLA)."""
    return _train("tf_function_xla", True, spec, X, Y, steps, lr, optimizer, device, dtype,
                  weights)
