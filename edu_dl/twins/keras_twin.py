"""Keras ``Sequential`` trained with ``compile`` and ``fit``: full batch, ``shuffle=False``,
one step per epoch, so ``History.history['loss'][t]`` is the loss before update t.

Keras's Adam adds epsilon to sqrt(v) before the bias correction (and defaults to 1e-7), so
``TorchAdam`` writes PyTorch's formula as a Keras optimizer. The squared-error losses are Keras
``Loss`` objects: each row's summed squared error (halved for Caffe's), reduced by Keras as a
mean over the batch or a plain sum. For float64, Keras's floatx is float64 while the twin runs:
the learning-rate variable and the loss metric are made in floatx.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from edu_dl.models.spec import ADAM_BETA1, ADAM_BETA2, ADAM_EPS, ModelSpec
from edu_dl.twins import History, StepTimer, prepare, tf_device

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def _keras_classes() -> tuple[type, type, type]:
    """TorchAdam, RowSquaredError and StepTimes, defined once Keras is imported."""
    import keras
    from keras import ops

    class TorchAdam(keras.optimizers.Optimizer):
        """PyTorch's Adam: w <- w - lr * m_hat / (sqrt(v_hat) + eps)."""

        def __init__(self, learning_rate: float, beta_1: float = ADAM_BETA1,
                     beta_2: float = ADAM_BETA2, epsilon: float = ADAM_EPS,
                     **kwargs: Any) -> None:
            super().__init__(learning_rate=learning_rate, name="torch_adam", **kwargs)
            self.beta_1, self.beta_2, self.epsilon = beta_1, beta_2, epsilon

        def build(self, var_list: list[Any]) -> None:
            if self.built:
                return
            super().build(var_list)
            self._m, self._v = self.add_optimizer_variables(var_list, ["m", "v"])

        def update_step(self, gradient: Any, variable: Any, learning_rate: Any) -> None:
            dtype = variable.dtype
            lr = ops.cast(learning_rate, dtype)
            g = ops.cast(gradient, dtype)
            t = ops.cast(self.iterations + 1, dtype)
            c1 = 1 - ops.power(ops.convert_to_tensor(self.beta_1, dtype), t)
            c2 = 1 - ops.power(ops.convert_to_tensor(self.beta_2, dtype), t)
            i = self._get_variable_index(variable)
            m, v = self._m[i], self._v[i]
            self.assign(m, self.beta_1 * m + (1 - self.beta_1) * g)
            self.assign(v, self.beta_2 * v + (1 - self.beta_2) * ops.square(g))
            self.assign_sub(variable, lr * (m / c1) / (ops.sqrt(v / c2) + self.epsilon))

    class RowSquaredError(keras.losses.Loss):
        """Per row: scale * sum_j (y_pred - y)^2; Keras then reduces over the batch."""

        def __init__(self, scale: float, reduction: str, dtype: Any) -> None:
            super().__init__(name="row_squared_error", reduction=reduction, dtype=dtype)
            self.scale = scale

        def call(self, y_true: Any, y_pred: Any) -> Any:
            return self.scale * ops.sum(ops.square(y_pred - y_true), axis=-1)

    class StepTimes(keras.callbacks.Callback):
        """Seconds of each training batch (= step: the batch is the whole data set)."""

        def __init__(self) -> None:
            super().__init__()
            self.timer = StepTimer()

        def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
            self.timer.start()

        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            self.timer.stop()

    return TorchAdam, RowSquaredError, StepTimes


def _loss(spec: ModelSpec, row_squared_error: type, dtype: str) -> Any:
    import keras

    if spec.classifier:
        return keras.losses.SparseCategoricalCrossentropy(from_logits=True, dtype=dtype)
    scale, reduction = {
        "mean_row_sum": (1.0, "sum_over_batch_size"),  # mean over rows of the row sums
        "sum": (1.0, "sum"),
        "euclidean": (0.5, "sum_over_batch_size"),     # sum / 2N
    }[spec.loss]
    return row_squared_error(scale, reduction, dtype)


def train(spec: ModelSpec, X: np.ndarray, Y: np.ndarray, steps: int, lr: float,
          optimizer: str = "sgd", device: str = "cpu", dtype: Any = np.float64,
          weights: dict[str, np.ndarray] | None = None) -> History:
    """Full-batch ``model.fit(X, Y, batch_size=N, epochs=steps, shuffle=False)``."""
    import keras
    import tensorflow as tf

    X, Y, init = prepare("keras", spec, X, Y, steps, optimizer, device, dtype, weights)
    torch_adam, row_squared_error, step_times = _keras_classes()
    floatx, dtype_name = keras.config.floatx(), X.dtype.name
    keras.config.set_floatx(dtype_name)
    try:
        with tf.device(tf_device(device)):
            model = keras.Sequential([
                keras.Input((spec.D_in,), dtype=dtype_name),
                # dtype per layer: Keras's global dtype policy is fixed at its first use
                keras.layers.Dense(spec.H, activation="relu", use_bias=False, dtype=dtype_name),
                keras.layers.Dense(spec.D_out, use_bias=False, dtype=dtype_name),
            ])
            model.layers[0].set_weights([init["w1"]])  # a Dense kernel is (in, out), as w1
            model.layers[1].set_weights([init["w2"]])
            opt = (keras.optimizers.SGD(learning_rate=lr) if optimizer == "sgd"
                   else torch_adam(learning_rate=lr))
            model.compile(optimizer=opt, loss=_loss(spec, row_squared_error, dtype_name))
            timing = step_times()
            keras_history = model.fit(X, Y, batch_size=spec.N, epochs=steps, shuffle=False,
                                      verbose=0, callbacks=[timing])
    finally:
        keras.config.set_floatx(floatx)
    final = {"w1": model.layers[0].get_weights()[0], "w2": model.layers[1].get_weights()[0]}
    losses = [float(v) for v in keras_history.history["loss"]]
    return History("keras", losses, timing.timer.seconds, final, native=keras_history,
                   info={"model": model, "optimizer": type(opt).__name__})
