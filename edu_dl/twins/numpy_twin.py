"""NumPy with hand-written gradients; the same code is the CuPy twin with device='gpu'.

The backward pass of y_pred = relu(X @ w1) @ w2, written out as in the lecture:
grad_w2 = relu(h).T @ g;  grad_h = (g @ w2.T) * (h > 0);  grad_w1 = X.T @ grad_h,
with g = d loss / d y_pred. The lecture's loss (mean_row_sum) is written out too, as the engine
benchmark times it (``make_step`` is its "NumPy by hand"); the others come from
``models.loss_and_grad``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from edu_dl import backend
from edu_dl.models import spec as models
from edu_dl.models.spec import ModelSpec
from edu_dl.twins import History, Stepper, prepare, run_steps


def make_step(spec: ModelSpec, X: np.ndarray, Y: np.ndarray, init: dict[str, np.ndarray],
              lr: float, optimizer: str = "sgd", device: str = "cpu") -> Stepper:
    """One full-batch step with NumPy (device='cpu') or CuPy (device='gpu') through ``xp``."""
    xp = backend.xp_for(device)
    X, Y = backend.to_device(X, device), backend.to_device(Y, device)
    start = [backend.to_device(init[k], device) for k in models.WEIGHT_NAMES]
    w1, w2 = (w.copy() for w in start)
    lecture_loss = spec.loss == "mean_row_sum"
    scale = np.dtype(X.dtype).type(2.0 / spec.N)  # d loss / d diff; float32 stays float32
    adam = models.adam_init(xp, [w1, w2]) if optimizer == "adam" else None

    def step() -> Any:
        nonlocal w1, w2  # updated in place below
        h = X @ w1
        h_relu = xp.maximum(h, 0)
        y_pred = h_relu @ w2
        if lecture_loss:  # mean(sum(diff**2, axis=1)), written out as the lecture does
            diff = y_pred - Y
            loss, grad_y_pred = xp.square(diff).sum(axis=1).mean(), scale * diff
        else:
            loss, grad_y_pred = models.loss_and_grad(xp, y_pred, Y, spec.loss)
        grad_w2 = h_relu.T @ grad_y_pred
        grad_h = grad_y_pred @ w2.T
        grad_h[h < 0] = 0
        grad_w1 = X.T @ grad_h
        if adam is None:
            w1 -= lr * grad_w1
            w2 -= lr * grad_w2
        else:
            models.adam_update(xp, [w1, w2], [grad_w1, grad_w2], adam, lr)
        return loss

    def reset() -> None:
        w1[...] = start[0]
        w2[...] = start[1]
        if adam is not None:
            fresh = models.adam_init(xp, [w1, w2])
            adam.m, adam.v, adam.t = fresh.m, fresh.v, 0

    def weights() -> dict[str, np.ndarray]:
        return {"w1": backend.to_numpy(w1), "w2": backend.to_numpy(w2)}

    # float() copies the loss to the host: on a GPU, a sync.
    return Stepper(step, float, reset, weights)


def train(spec: ModelSpec, X: np.ndarray, Y: np.ndarray, steps: int, lr: float,
          optimizer: str = "sgd", device: str = "cpu", dtype: Any = np.float64,
          weights: dict[str, np.ndarray] | None = None) -> History:
    """Full-batch training with NumPy (device='cpu') or CuPy (device='gpu') through ``xp``."""
    X, Y, init = prepare("numpy", spec, X, Y, steps, optimizer, device, dtype, weights)
    history = run_steps("numpy" if device == "cpu" else "cupy",
                        make_step(spec, X, Y, init, lr, optimizer, device), steps)
    history.info["xp"] = backend.xp_for(device).__name__
    return history
