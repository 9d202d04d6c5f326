"""The course's stand-in for a piece of your own framework (``mytorch/``) you could not finish.

Exercises 10, 11, 18 and 24 build on the engine you write in exercise 08, and exercise 12's
schedule on exercise 07's order. If such a piece does not pass its check yet and you want to go
on, put the stand-in in its place, in your own file, with a comment that says so::

    # mytorch/tape.py: exercise 08 unfinished, the course's stand-in in its place
    from edu_dl.notebook.standin import Tape, backward

    # mytorch/functional.py
    from edu_dl.notebook.standin import softmax_cross_entropy

    # mytorch/graph.py: exercise 07 unfinished
    from edu_dl.notebook.standin import topological_order

(``unbroadcast`` has no stand-in: your tape needs it, and a stand-in tape does not.) The
stand-ins keep your interface (a tape of NumPy values and records ``(out, inputs, vjp)``,
``backward`` returning one gradient per value) but are built on PyTorch's autograd, not on the
derivations the exercise asks for: they teach nothing you have not seen, give no exercise's answer
away, and earn none of exercises 07's and 08's points (their parts ask for your own code and read
your source, where they find this import). Exercise 10's ``mytorch/nn.py`` works on them unchanged.
Replace them with your own pieces whenever you can: that is the framework you are building.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np

Vjp = Callable[[Any], tuple[Any, ...]]


def _torch() -> Any:
    import torch  # imported when a stand-in is used: importing edu_dl stays cheap

    return torch


@functools.cache
def _recorded() -> Any:
    """The autograd Function for a record made by ``Tape.record`` (the student's own op, with
    a NumPy vjp), one node of PyTorch's graph whose backward calls that vjp; made once."""
    torch = _torch()

    class Recorded(torch.autograd.Function):  # type: ignore[name-defined]
        @staticmethod
        def forward(ctx: Any, value: Any, vjp: Vjp, *inputs: Any) -> Any:
            ctx.vjp = vjp
            return value.clone()

        @staticmethod
        def backward(ctx: Any, grad: Any) -> Any:
            grads = ctx.vjp(grad.detach().numpy())
            return (None, None, *(torch.as_tensor(np.asarray(g, dtype=np.float64))
                                  for g in grads))

    return Recorded


class Tape:
    """The stand-in tape: exercise 08's interface (``values``, ``records``, ``input``,
    ``record`` and the ops add, mul, matmul, exp, log, relu, sum, mean), each op computed by
    PyTorch, which also keeps the graph that :func:`backward` differentiates."""

    def __init__(self) -> None:
        self.values: list[np.ndarray] = []
        self.records: list[tuple[int, tuple[int, ...], Vjp]] = []
        self.tensors: list[Any] = []  # values[i] as a PyTorch tensor in autograd's graph

    def input(self, value: Any) -> int:
        """Put a leaf value on the tape; returns its id."""
        torch = _torch()
        tensor = torch.tensor(np.asarray(value, dtype=np.float64), requires_grad=True)
        return self._keep(tensor)

    def record(self, value: Any, inputs: Any, vjp: Vjp) -> int:
        """Put an op's result on the tape with the vjp that differentiates it; its id."""
        inputs = tuple(inputs)
        value = _torch().as_tensor(np.asarray(value, dtype=np.float64))
        tensor = _recorded().apply(value, vjp, *(self.tensors[i] for i in inputs))
        out = self._keep(tensor)
        self.records.append((out, inputs, vjp))
        return out

    def _keep(self, tensor: Any) -> int:
        self.tensors.append(tensor)
        self.values.append(tensor.detach().numpy())
        return len(self.values) - 1

    def _op(self, fn: Callable[..., Any], *inputs: int) -> int:
        torch = _torch()
        out = self._keep(fn(*(self.tensors[i] for i in inputs)))

        def vjp(dout: Any) -> tuple[Any, ...]:
            grads = torch.autograd.grad(self.tensors[out], [self.tensors[i] for i in inputs],
                                        torch.as_tensor(np.asarray(dout, dtype=np.float64)),
                                        retain_graph=True, allow_unused=True)
            return tuple(np.zeros(self.values[i].shape) if g is None else g.numpy()
                         for i, g in zip(inputs, grads))

        self.records.append((out, inputs, vjp))
        return out

    def add(self, a: int, b: int) -> int:
        return self._op(_torch().add, a, b)

    def mul(self, a: int, b: int) -> int:
        return self._op(_torch().mul, a, b)

    def matmul(self, a: int, b: int) -> int:
        return self._op(_torch().matmul, a, b)

    def exp(self, a: int) -> int:
        return self._op(_torch().exp, a)

    def log(self, a: int) -> int:
        return self._op(_torch().log, a)

    def relu(self, a: int) -> int:
        return self._op(_torch().relu, a)

    def sum(self, a: int) -> int:
        return self._op(_torch().sum, a)

    def mean(self, a: int) -> int:
        return self._op(_torch().mean, a)


def backward(tape: Tape, output: int, dout: Any) -> list[np.ndarray]:
    """The stand-in backward pass: PyTorch's autograd over the stand-in tape's graph, one
    gradient per value of the tape (zeros where the output does not depend on it)."""
    torch = _torch()
    grads = torch.autograd.grad(tape.tensors[output], tape.tensors,
                                torch.as_tensor(np.asarray(dout, dtype=np.float64)),
                                retain_graph=True, allow_unused=True)
    return [np.zeros(value.shape) if g is None else g.numpy().copy()
            for value, g in zip(tape.values, grads)]


def softmax_cross_entropy(logits: Any, y: Any) -> tuple[float, np.ndarray]:
    """The stand-in: PyTorch's cross-entropy and its gradient, as (loss, dlogits)."""
    torch = _torch()
    scores = torch.tensor(np.asarray(logits, dtype=np.float64), requires_grad=True)
    loss = torch.nn.functional.cross_entropy(scores, torch.as_tensor(np.asarray(y)))
    (grad,) = torch.autograd.grad(loss, scores)
    return float(loss.detach()), grad.numpy()


def topological_order(n_nodes: int, edges: Any) -> np.ndarray:
    """The stand-in: the standard library's ``graphlib`` orders the graph (exercise 07's
    contract: every node once, each after the nodes that feed it)."""
    from graphlib import TopologicalSorter

    sorter: TopologicalSorter[int] = TopologicalSorter({node: set() for node in range(n_nodes)})
    for src, dst in np.asarray(edges, dtype=np.int64).reshape(-1, 2):
        sorter.add(int(dst), int(src))
    return np.array(list(sorter.static_order()), dtype=np.int64)
