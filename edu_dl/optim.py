"""Optimizers: update parameters in place from their ``.grad``, as ``torch.optim`` does."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from edu_dl.autograd.tensor import Tensor


class Optimizer:
    def __init__(self, params: Iterable[Tensor], lr: float) -> None:
        self.params = list(params)
        if not self.params:
            raise ValueError(f"{type(self).__name__}: got an empty parameter list")
        for p in self.params:
            if not (isinstance(p, Tensor) and p.requires_grad):
                raise TypeError(f"{type(self).__name__}: every parameter must be a Tensor with "
                                f"requires_grad=True")
        if lr <= 0:
            raise ValueError(f"{type(self).__name__}: learning rate must be positive, got {lr}")
        self.lr = lr

    def zero_grad(self) -> None:
        """Forget the gradients (set to None, as PyTorch's default)."""
        for p in self.params:
            p.grad = None

    def step(self) -> None:
        raise NotImplementedError


class SGD(Optimizer):
    """p -= lr * v, with v = momentum * v + grad (PyTorch's formula; plain SGD when momentum=0)."""

    def __init__(self, params: Iterable[Tensor], lr: float, momentum: float = 0.0) -> None:
        super().__init__(params, lr)
        self.momentum = momentum
        self.velocity: list[Any] = [None] * len(self.params)

    def step(self) -> None:
        for i, p in enumerate(self.params):
            if p.grad is None:
                continue
            g = p.grad.data
            if self.momentum:
                v = self.velocity[i]
                # The first step copies the gradient, as torch.optim.SGD's momentum buffer does.
                v = g.copy() if v is None else self.momentum * v + g
                self.velocity[i] = g = v
            p.data -= self.lr * g


class Adam(Optimizer):
    """PyTorch's Adam: m, v moving averages; p -= lr * m_hat / (sqrt(v_hat) + eps)."""

    def __init__(
        self,
        params: Iterable[Tensor],
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
    ) -> None:
        super().__init__(params, lr)
        self.beta1, self.beta2 = betas
        self.eps = eps
        # One step count per parameter, as torch: a parameter skipped (no grad) does not count.
        self.t: list[int] = [0] * len(self.params)
        self.m: list[Any] = [None] * len(self.params)
        self.v: list[Any] = [None] * len(self.params)

    def step(self) -> None:
        b1, b2 = self.beta1, self.beta2
        for i, p in enumerate(self.params):
            if p.grad is None:
                continue
            self.t[i] += 1
            correction1, correction2 = 1 - b1 ** self.t[i], 1 - b2 ** self.t[i]
            g = p.grad.data
            xp = p.xp
            m = self.m[i] if self.m[i] is not None else xp.zeros_like(p.data)
            v = self.v[i] if self.v[i] is not None else xp.zeros_like(p.data)
            m = b1 * m + (1 - b1) * g
            v = b2 * v + (1 - b2) * (g * g)
            self.m[i], self.v[i] = m, v
            p.data -= self.lr * (m / correction1) / (xp.sqrt(v / correction2) + self.eps)
