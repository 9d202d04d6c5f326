"""PyTorch with raw tensors and autograd: the forward by hand, ``loss.backward()``, the update by
hand under ``torch.no_grad()`` (the second of the lecture's three levels: Tensor, autograd, Module).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from edu_dl.models import spec as models
from edu_dl.models.spec import ModelSpec
from edu_dl.twins import History, StepTimer, prepare, torch_device


def torch_loss(spec: ModelSpec, y_pred: Any, y: Any) -> Any:
    """The spec's loss in PyTorch ops."""
    import torch

    if spec.classifier:
        return torch.nn.functional.cross_entropy(y_pred, y)
    if spec.loss == "mean_row_sum":
        return ((y_pred - y) ** 2).sum(dim=1).mean()
    return ((y_pred - y) ** 2).sum() * models.loss_scale(spec.loss, spec.N)


def train(spec: ModelSpec, X: np.ndarray, Y: np.ndarray, steps: int, lr: float,
          optimizer: str = "sgd", device: str = "cpu", dtype: Any = np.float64,
          weights: dict[str, np.ndarray] | None = None) -> History:
    """Full-batch training with torch tensors that require grad; 'gpu' means CUDA."""
    import torch

    X, Y, init = prepare("torch_raw", spec, X, Y, steps, optimizer, device, dtype, weights)
    dev = torch_device(device)
    x, y = torch.from_numpy(X).to(dev), torch.from_numpy(Y).to(dev)
    w1 = torch.tensor(init["w1"], device=dev, requires_grad=True)
    w2 = torch.tensor(init["w2"], device=dev, requires_grad=True)
    # models.adam_update is written over a namespace with sqrt and zeros_like: torch is one.
    adam = models.adam_init(torch, [w1.detach(), w2.detach()])
    losses, timer = [], StepTimer()
    for _ in range(steps):
        timer.start()
        loss = torch_loss(spec, torch.relu(x @ w1) @ w2, y)
        loss.backward()
        with torch.no_grad():
            grads = [w1.grad, w2.grad]
            if optimizer == "sgd":
                models.sgd_update([w1, w2], grads, lr)
            else:
                models.adam_update(torch, [w1, w2], grads, adam, lr)
        w1.grad, w2.grad = None, None
        losses.append(loss.item())
        timer.stop()
    final = {"w1": w1.detach().cpu().numpy(), "w2": w2.detach().cpu().numpy()}
    return History("torch_raw", losses, timer.seconds, final)
