"""PyTorch with a custom ``autograd.Function`` (ReLU with a hand-written backward, as the
lecture's MyReLU) inside a custom ``nn.Module`` (the lecture's TwoLayerNet).

``MyReLU.backward_calls`` counts how often autograd called our backward: the tests check it ran.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from edu_dl.models.spec import ADAM_BETA1, ADAM_BETA2, ADAM_EPS, ModelSpec
from edu_dl.twins import History, StepTimer, prepare, torch_device
from edu_dl.twins.torch_raw import torch_loss


class MyReLU(torch.autograd.Function):
    """relu(x) = max(x, 0);  d relu / dx = 1 where x > 0, else 0."""

    backward_calls = 0

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x)
        return x.clamp(min=0)

    @staticmethod
    def backward(ctx: Any, grad_y: torch.Tensor) -> torch.Tensor:
        MyReLU.backward_calls += 1
        (x,) = ctx.saved_tensors
        grad_x = grad_y.clone()
        grad_x[x < 0] = 0
        return grad_x


class TwoLayerNet(torch.nn.Module):
    """y_pred = MyReLU(x @ w1) @ w2, with w1 (D_in, H) and w2 (H, D_out) as Parameters."""

    def __init__(self, w1: torch.Tensor, w2: torch.Tensor) -> None:
        super().__init__()
        self.w1 = torch.nn.Parameter(w1)
        self.w2 = torch.nn.Parameter(w2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return MyReLU.apply(x @ self.w1) @ self.w2


def train(spec: ModelSpec, X: np.ndarray, Y: np.ndarray, steps: int, lr: float,
          optimizer: str = "sgd", device: str = "cpu", dtype: Any = np.float64,
          weights: dict[str, np.ndarray] | None = None) -> History:
    """Full-batch training of the custom Module with ``torch.optim``; 'gpu' means CUDA."""
    X, Y, init = prepare("torch_custom", spec, X, Y, steps, optimizer, device, dtype, weights)
    dev = torch_device(device)
    model = TwoLayerNet(torch.tensor(init["w1"], device=dev), torch.tensor(init["w2"], device=dev))
    x, y = torch.from_numpy(X).to(dev), torch.from_numpy(Y).to(dev)
    opt: torch.optim.Optimizer
    if optimizer == "sgd":
        opt = torch.optim.SGD(model.parameters(), lr=lr)
    else:
        opt = torch.optim.Adam(model.parameters(), lr=lr, betas=(ADAM_BETA1, ADAM_BETA2),
                               eps=ADAM_EPS)
    calls_before = MyReLU.backward_calls
    losses, timer = [], StepTimer()
    for _ in range(steps):
        timer.start()
        loss = torch_loss(spec, model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
        timer.stop()
    final = {"w1": model.w1.detach().cpu().numpy(), "w2": model.w2.detach().cpu().numpy()}
    return History("torch_custom", losses, timer.seconds, final, native=model,
                   info={"backward_calls": MyReLU.backward_calls - calls_before})
