"""PyTorch's third level: ``nn.Sequential`` of ``nn.Linear(bias=False)``, a loss Module and
``torch.optim`` (SGD, or Adam with eps set explicitly) — the lecture's PyTorch program, fixed:
plain tensors instead of ``Variable``, ``reduction='sum'`` instead of ``size_average=False``,
and no second update by hand after ``optimizer.step()``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from edu_dl.models.spec import ADAM_BETA1, ADAM_BETA2, ADAM_EPS, ModelSpec, loss_scale
from edu_dl.twins import History, StepTimer, prepare, torch_device


def train(spec: ModelSpec, X: np.ndarray, Y: np.ndarray, steps: int, lr: float,
          optimizer: str = "sgd", device: str = "cpu", dtype: Any = np.float64,
          weights: dict[str, np.ndarray] | None = None) -> History:
    """Full-batch training of ``nn.Sequential`` with ``torch.optim``; 'gpu' means CUDA."""
    import torch

    X, Y, init = prepare("torch_nn", spec, X, Y, steps, optimizer, device, dtype, weights)
    dev = torch_device(device)
    torch_dtype = torch.float64 if X.dtype == np.float64 else torch.float32
    first = torch.nn.Linear(spec.D_in, spec.H, bias=False)
    second = torch.nn.Linear(spec.H, spec.D_out, bias=False)
    model = torch.nn.Sequential(first, torch.nn.ReLU(), second).to(device=dev, dtype=torch_dtype)
    with torch.no_grad():  # torch stores a Linear's weight (out, in): the transpose of w
        first.weight.copy_(torch.from_numpy(init["w1"].T))
        second.weight.copy_(torch.from_numpy(init["w2"].T))
    x, y = torch.from_numpy(X).to(dev), torch.from_numpy(Y).to(dev)
    if spec.classifier:
        loss_fn: Any = torch.nn.CrossEntropyLoss()
    else:
        mse = torch.nn.MSELoss(reduction="sum")
        scale = loss_scale(spec.loss, spec.N)
        loss_fn = mse if scale == 1.0 else (lambda y_pred, y: mse(y_pred, y) * scale)
    opt: torch.optim.Optimizer
    if optimizer == "sgd":
        opt = torch.optim.SGD(model.parameters(), lr=lr)
    else:
        opt = torch.optim.Adam(model.parameters(), lr=lr, betas=(ADAM_BETA1, ADAM_BETA2),
                               eps=ADAM_EPS)
    losses, timer = [], StepTimer()
    for _ in range(steps):
        timer.start()
        loss = loss_fn(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
        timer.stop()
    final = {"w1": first.weight.detach().cpu().numpy().T.copy(),
             "w2": second.weight.detach().cpu().numpy().T.copy()}
    return History("torch_nn", losses, timer.seconds, final, native=model,
                   info={"optimizer": type(opt).__name__})
