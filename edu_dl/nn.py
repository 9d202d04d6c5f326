"""Modules: layers that hold parameters, as PyTorch's third level of abstraction (after Tensor
and autograd). A Module is a callable with ``parameters()``; losses are Modules too."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from edu_dl.autograd import ops
from edu_dl.autograd.tensor import Tensor


class Parameter(Tensor):
    """A Tensor that a Module owns and an optimizer updates (always requires grad)."""

    __slots__ = ()

    def __init__(self, data: Any, dtype: Any = None, device: str | None = None) -> None:
        super().__init__(data, requires_grad=True, dtype=dtype, device=device)


class Module:
    """Base class: subclasses set Parameters and sub-Modules as attributes and define forward."""

    def forward(self, *args: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__} must define forward()")

    def __call__(self, *args: Any) -> Any:
        return self.forward(*args)

    def named_parameters(self, prefix: str = "") -> Iterator[tuple[str, Parameter]]:
        """Every Parameter of this module and its children, in the order they were set."""
        seen: set[int] = set()
        for name, value in vars(self).items():
            items: list[tuple[str, Any]] = [(name, value)]
            if isinstance(value, list | tuple):
                items = [(f"{name}.{i}", v) for i, v in enumerate(value)]
            for key, item in items:
                if isinstance(item, Parameter) and id(item) not in seen:
                    seen.add(id(item))
                    yield prefix + key, item
                elif isinstance(item, Module):
                    for sub, p in item.named_parameters(prefix + key + "."):
                        if id(p) not in seen:
                            seen.add(id(p))
                            yield sub, p

    def parameters(self) -> list[Parameter]:
        return [p for _, p in self.named_parameters()]

    def zero_grad(self) -> None:
        for p in self.parameters():
            p.grad = None

    def to(self, device: str) -> Module:
        """Move every parameter to 'cpu' or 'gpu' in place (as PyTorch's Module.to)."""
        for p in self.parameters():
            moved = p.to(device)
            p.data, p.grad = moved.data, None
        return self

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class Linear(Module):
    """y = x @ weight + bias, with weight of shape (in_features, out_features).

    The weight is stored (in, out), as the lecture's ``w1`` (D x H), not PyTorch's (out, in);
    initialized uniformly in ±1/sqrt(in_features) like PyTorch unless given.
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        bias: bool = True,
        dtype: Any = np.float32,
        rng: np.random.Generator | None = None,
        weight: Any = None,
        bias_value: Any = None,
    ) -> None:
        rng = rng if rng is not None else np.random.default_rng()
        bound = 1.0 / np.sqrt(in_features)
        if weight is None:
            weight = rng.uniform(-bound, bound, (in_features, out_features))
        # A copy: the optimizer updates parameters in place, and the caller's array is theirs.
        self.weight = Parameter(np.array(weight, dtype=dtype))
        if self.weight.shape != (in_features, out_features):
            raise ValueError(f"Linear: weight must have shape {(in_features, out_features)}, "
                             f"got {self.weight.shape}")
        self.bias: Parameter | None = None
        if bias:
            if bias_value is None:
                bias_value = rng.uniform(-bound, bound, (out_features,))
            self.bias = Parameter(np.array(bias_value, dtype=dtype))
        self.in_features, self.out_features = in_features, out_features

    def forward(self, x: Any) -> Tensor:
        out = x @ self.weight
        return out if self.bias is None else out + self.bias

    def __repr__(self) -> str:
        return f"Linear({self.in_features}, {self.out_features}, bias={self.bias is not None})"


class ReLU(Module):
    def forward(self, x: Any) -> Tensor:
        return ops.relu(x)

    def __repr__(self) -> str:
        return "ReLU()"


class Sequential(Module):
    """Modules applied one after another."""

    def __init__(self, *layers: Module) -> None:
        self.layers = list(layers)

    def forward(self, x: Any) -> Any:
        for layer in self.layers:
            x = layer(x)
        return x

    def __getitem__(self, i: int) -> Module:
        return self.layers[i]

    def __len__(self) -> int:
        return len(self.layers)

    def __repr__(self) -> str:
        inner = "\n".join(f"  ({i}): {layer!r}" for i, layer in enumerate(self.layers))
        return f"Sequential(\n{inner}\n)"


def _check_reduction(name: str, reduction: str) -> str:
    if reduction not in ("mean", "sum"):
        raise ValueError(f"{name}: reduction must be 'mean' or 'sum', got {reduction!r}")
    return reduction


class MSELoss(Module):
    """Squared error: sum (y_hat - y)^2 with reduction='sum', its mean over elements with 'mean'."""

    def __init__(self, reduction: str = "mean") -> None:
        self.reduction = _check_reduction("MSELoss", reduction)

    def forward(self, y_hat: Any, y: Any) -> Tensor:
        y_hat_shape = getattr(y_hat, "shape", None)
        if y_hat_shape != getattr(y, "shape", y_hat_shape):
            raise ValueError(f"MSELoss: prediction shape {y_hat_shape} != target shape "
                             f"{getattr(y, 'shape', None)}")
        squared = (y_hat - y) ** 2
        return squared.sum() if self.reduction == "sum" else squared.mean()


class CrossEntropyLoss(Module):
    """Softmax cross-entropy of logits (N, C) against integer labels (N,)."""

    def __init__(self, reduction: str = "mean") -> None:
        self.reduction = _check_reduction("CrossEntropyLoss", reduction)

    def forward(self, logits: Any, labels: Any) -> Tensor:
        if isinstance(labels, Tensor):
            labels = labels.data
        return ops.softmax_cross_entropy(logits, labels, reduction=self.reduction)
