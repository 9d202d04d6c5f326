"""edu_dl's eager engine: Tensors, ``nn.Sequential`` of bias-free ``nn.Linear``, ``edu_dl.optim``.

Define-by-run, as PyTorch: the graph is recorded while the forward runs, ``loss.backward()``
walks it back. ``nn.Linear`` stores its weight (in, out), exactly the lecture's w1 and w2.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from edu_dl import backend, nn, optim
from edu_dl.autograd import ops
from edu_dl.autograd.tensor import Tensor
from edu_dl.models.spec import ADAM_BETA1, ADAM_BETA2, ADAM_EPS, ModelSpec, loss_scale
from edu_dl.twins import History, StepTimer, prepare


def _loss(spec: ModelSpec, y_pred: Tensor, Y: Any) -> Tensor:
    if spec.classifier:
        return nn.CrossEntropyLoss()(y_pred, Y)
    # MSELoss(reduction='sum') is the PyTorch program's loss; the others are scaled copies.
    return nn.MSELoss(reduction="sum")(y_pred, Y) * loss_scale(spec.loss, spec.N)


def train(spec: ModelSpec, X: np.ndarray, Y: np.ndarray, steps: int, lr: float,
          optimizer: str = "sgd", device: str = "cpu", dtype: Any = np.float64,
          weights: dict[str, np.ndarray] | None = None) -> History:
    """Full-batch training with edu_dl Tensors on 'cpu' (NumPy) or 'gpu' (CuPy)."""
    X, Y, init = prepare("edu_eager", spec, X, Y, steps, optimizer, device, dtype, weights)
    model = nn.Sequential(
        nn.Linear(spec.D_in, spec.H, bias=False, dtype=dtype, weight=init["w1"]),
        nn.ReLU(),
        nn.Linear(spec.H, spec.D_out, bias=False, dtype=dtype, weight=init["w2"]),
    ).to(device)
    x = Tensor(X, device=device)
    y: Any = Tensor(Y, device=device) if not spec.classifier else backend.to_device(Y, device)
    opt: optim.Optimizer
    if optimizer == "sgd":
        opt = optim.SGD(model.parameters(), lr=lr)
    else:
        opt = optim.Adam(model.parameters(), lr=lr, betas=(ADAM_BETA1, ADAM_BETA2),
                         eps=ADAM_EPS)
    losses, timer = [], StepTimer()
    for _ in range(steps):
        timer.start()
        loss = _loss(spec, model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss.item()))
        timer.stop()
    w1, w2 = (backend.to_numpy(p.data) for p in model.parameters())
    return History("edu_eager", losses, timer.seconds, {"w1": w1, "w2": w2}, native=model,
                   info={"loss_op": type(loss._op).__name__ if loss._op else None,
                         "ops_module": ops.__name__})
