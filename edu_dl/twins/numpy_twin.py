"""NumPy with hand-written gradients; the same code is the CuPy twin with device='gpu'.

The backward pass of y_pred = relu(X @ w1) @ w2, written out as in the lecture:
grad_w2 = relu(h).T @ g;  grad_h = (g @ w2.T) * (h > 0);  grad_w1 = X.T @ grad_h,
with g = d loss / d y_pred from ``models.loss_and_grad``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from edu_dl import backend
from edu_dl.models import spec as models
from edu_dl.models.spec import ModelSpec
from edu_dl.twins import History, StepTimer, prepare


def train(spec: ModelSpec, X: np.ndarray, Y: np.ndarray, steps: int, lr: float,
          optimizer: str = "sgd", device: str = "cpu", dtype: Any = np.float64,
          weights: dict[str, np.ndarray] | None = None) -> History:
    """Full-batch training with NumPy (device='cpu') or CuPy (device='gpu') through ``xp``."""
    X, Y, init = prepare("numpy", spec, X, Y, steps, optimizer, device, dtype, weights)
    xp = backend.xp_for(device)
    X, Y = backend.to_device(X, device), backend.to_device(Y, device)
    w1, w2 = (backend.to_device(init[k], device).copy() for k in models.WEIGHT_NAMES)
    adam = models.adam_init(xp, [w1, w2])
    losses, timer = [], StepTimer()
    for _ in range(steps):
        timer.start()
        h, y_pred = models.forward(xp, X, w1, w2)
        loss, grad_y_pred = models.loss_and_grad(xp, y_pred, Y, spec.loss)
        grad_w2 = xp.maximum(h, 0).T @ grad_y_pred
        grad_h = grad_y_pred @ w2.T
        grad_h[h < 0] = 0
        grad_w1 = X.T @ grad_h
        if optimizer == "sgd":
            models.sgd_update([w1, w2], [grad_w1, grad_w2], lr)
        else:
            models.adam_update(xp, [w1, w2], [grad_w1, grad_w2], adam, lr)
        losses.append(float(loss))  # float() copies the loss to the host: a GPU sync
        timer.stop()
    final = {"w1": backend.to_numpy(w1), "w2": backend.to_numpy(w2)}
    return History("numpy" if device == "cpu" else "cupy", losses, timer.seconds, final,
                   info={"xp": xp.__name__})
