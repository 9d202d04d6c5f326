"""Exercise 10 (PyTorch), public half: how its parts call a student's function, class or module,
the source check for a class's bases and methods, and a generic hint about a gradient's shape.
Nothing here computes an answer.

The call adapters hand the student's code torch float64 tensors and bring its results back as
NumPy arrays (the custom Function's gradients as its backward returns them, before autograd can
sum a broadcast gradient into shape); what they observe besides (autograd switched off, the
backward really ran, the layers found in the module) is ``check()``'s feedback only. The oracles
and the mistake replays stay in the private part file; the rules about a list of losses are
exercise 9's (:mod:`edu_dl.harness.ex09`).
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from edu_dl.grading.authoring import guard
from edu_dl.grading.authoring.hints import Rule, close
from edu_dl.grading.authoring.source import definition_node
from edu_dl.grading.authoring.spec import CheckFailure, Verdict

Case = tuple[Any, ...]


# --------------------------------------------------------------------------- conversions


def to_torch(value: Any, arg: int) -> Any:
    """Case argument ``arg`` as the student sees it: arrays become torch float64 tensors
    (copies, watched by the guard: a write into one is a write into that argument)."""
    import torch

    if isinstance(value, np.ndarray) and value.dtype.kind == "f":
        return guard.watch(arg, torch.tensor(value, dtype=torch.float64))
    return value


def numbers(result: Any, what: str = "losses") -> np.ndarray:
    """A list of losses (Python floats, 0-d tensors or arrays) or a 1-d tensor, as float64."""
    try:
        if hasattr(result, "detach"):
            return np.asarray(result.detach().cpu().numpy(), dtype=np.float64)
        return np.array([float(v) for v in result], dtype=np.float64)
    except (TypeError, ValueError, RuntimeError) as exc:
        raise CheckFailure(f"return the {what} as a list of numbers (loss.item() each step); "
                           f"got a {type(result).__name__} ({exc})") from None


def raw(value: Any) -> Any:
    """A returned gradient as the student's code made it (a tensor's data, shape untouched)."""
    if hasattr(value, "detach"):
        return value.detach().cpu().numpy().copy()
    return value


# --------------------------------------------------------------------------- 1. gradients by hand


def call_manual(fn: Callable[..., Any], args: Case) -> np.ndarray:
    """Call with torch tensors and autograd switched off: the gradients must be written by hand."""
    import torch

    with torch.no_grad():
        try:
            result = fn(*(to_torch(a, j) for j, a in enumerate(args)))
        except RuntimeError as exc:
            if "grad" not in str(exc):
                raise
            raise CheckFailure(f"{type(exc).__name__}: {exc}\n  hint: this part runs with "
                               "autograd switched off (torch.no_grad()): compute the gradients "
                               "yourself with the chain rule, as in the lecture's level "
                               "1") from None
    return numbers(result)


# --------------------------------------------------------------------------- 2. autograd.Function


def call_function(cls: Any, args: Case) -> tuple[Any, ...]:
    """Forward and backward through cls.apply; the student's backward must really run.

    The gradients recorded are those the student's backward RETURNS, not the inputs' .grad:
    autograd quietly sums a gradient that broadcasts to its input (db of shape (N, M) for b of
    shape (M,)), which would hide the classic "forgot the batch sum" mistake.
    """
    import torch

    if not (isinstance(cls, type) and issubclass(cls, torch.autograd.Function)):
        raise CheckFailure(f"MyLinear must be a subclass of torch.autograd.Function, got "
                           f"{cls!r}")
    returned: list[Any] = []
    backward = cls.backward

    def recorded_backward(ctx: Any, *grad_outputs: Any) -> Any:
        grads = backward(ctx, *grad_outputs)
        returned.append(grads)
        return grads

    # A subclass with the same name (so torch's messages name the student's class) whose backward
    # records what the student's returns before autograd sees it.
    recording: Any = type(cls.__name__, (cls,), {"backward": staticmethod(recorded_backward)})
    x, w, b = (guard.watch(j, torch.tensor(a, dtype=torch.float64, requires_grad=True))
               for j, a in enumerate(args[:3]))
    out = recording.apply(x, w, b)
    if not isinstance(out, torch.Tensor):
        raise CheckFailure(f"forward must return a tensor, got a {type(out).__name__}")
    try:
        out.backward(guard.watch(3, torch.tensor(args[3], dtype=torch.float64)))
    except RuntimeError as exc:
        text = str(exc)
        if "invalid gradient" in text or "incorrect number of gradients" in text:
            raise CheckFailure(f"backward: {text}\n  hint: backward returns one gradient per "
                               "input of forward, in order, each of its input's shape: (dx, dw, "
                               "db) with dx (N, D), dw (D, M), db (M,)") from None
        raise
    if not returned:
        raise CheckFailure("your backward never ran: subclass torch.autograd.Function, write "
                           "forward(ctx, x, w, b) and backward(ctx, grad_output) as "
                           "staticmethods, and compute out in forward (MyLinear.apply calls it)")
    grads = returned[-1] if isinstance(returned[-1], tuple | list) else (returned[-1],)
    for name, grad in zip(("x", "w", "b"), grads):
        if grad is None:
            raise CheckFailure(f"backward returned None for {name}: return a gradient for "
                               "every input")
    return (out.detach().numpy(), *(raw(g) for g in grads))


@dataclass(frozen=True)
class ShapeOfArgument(Rule):
    """The result (or an output) has argument ``argument``'s shape, and the expected one has not
    (a gradient left unsummed over the batch, say)."""

    argument: int = 0

    def test(self, expected: Any, got: Any, args: Case) -> bool:
        return np.shape(got) == np.shape(args[self.argument]) != np.shape(expected)


@dataclass(frozen=True)
class ClassCheck:
    """A source check: the definition is a class with ``base`` (any dotted name ending so) among
    its bases and the given methods in its body. Data only, so a release can carry it."""

    base: str
    methods: tuple[str, ...]
    what: str

    def __call__(self, source: str) -> Verdict:
        node = definition_node(source)
        bases = [ast.unparse(b).split(".")[-1] for b in getattr(node, "bases", [])]
        if not isinstance(node, ast.ClassDef) or self.base not in bases:
            return Verdict(False, f"{node.name} is not a class deriving from {self.what}")
        defined = {n.name for n in node.body if isinstance(n, ast.FunctionDef)}
        missing = [m for m in self.methods if m not in defined]
        if missing:
            return Verdict(False, f"{node.name} defines no {', '.join(missing)}: write "
                                  f"{' and '.join(self.methods)} in the class itself")
        return Verdict(True)


# --------------------------------------------------------------------------- 3. nn.Module


def call_module(cls: Any, args: Case) -> tuple[np.ndarray, np.ndarray]:
    """ResidualBlock(D, H) in float64: its output as built (before any weight is set), then with
    its two Linear layers set to the case's weights."""
    import torch

    x, w1, b1, w2, b2 = args
    d, h = x.shape[1], w1.shape[0]
    net = cls(d, h)
    if not isinstance(net, torch.nn.Module):
        raise CheckFailure(f"ResidualBlock must subclass torch.nn.Module, got "
                           f"{type(net).__name__}")
    net = net.double()
    linears = [m for m in net.modules() if isinstance(m, torch.nn.Linear)]
    found = ", ".join(f"Linear({m.in_features}, {m.out_features}, bias={m.bias is not None})"
                      for m in linears)
    wanted = [(d, h), (h, d)]
    if len(linears) != 2 or any(m.bias is None for m in linears) or sorted(
            (m.in_features, m.out_features) for m in linears) != sorted(wanted):
        raise CheckFailure(f"ResidualBlock({d}, {h}) should hold two layers, nn.Linear({d}, {h}) "
                           f"and nn.Linear({h}, {d}), with biases; found: "
                           f"{found or 'no nn.Linear'}")
    first = next(m for m in linears if (m.in_features, m.out_features) == wanted[0])
    second = next(m for m in linears if m is not first)
    inputs = guard.watch(0, torch.tensor(x, dtype=torch.float64))
    fresh = net(inputs)
    with torch.no_grad():
        for layer, weight, bias in ((first, w1, b1), (second, w2, b2)):
            layer.weight.copy_(torch.tensor(weight))
            layer.bias.copy_(torch.tensor(bias))
    out = net(inputs)
    for what in (fresh, out):
        if not isinstance(what, torch.Tensor):
            raise CheckFailure(f"forward must return a tensor, got a {type(what).__name__}")
    return fresh.detach().numpy().copy(), out.detach().numpy()


@dataclass(frozen=True)
class DiffersFromArgument(Rule):
    """The expected result (or output) is argument ``argument`` itself and the result is not
    (a module that should start as the identity does not)."""

    argument: int = 0

    def test(self, expected: Any, got: Any, args: Case) -> bool:
        return close(expected, args[self.argument]) and not close(got, args[self.argument])


# --------------------------------------------------------------------------- 4. Adam, accumulated


def call_accumulated(fn: Callable[..., Any], args: Case) -> tuple[np.ndarray, np.ndarray]:
    """fn on torch tensors: its losses as float64, and the most rows that any torch.nn.Module's
    forward received as its first input (0 when no module ran), seen by a global forward hook."""
    import torch

    most_rows = [0]

    def count_rows(module: Any, inputs: Any, output: Any) -> None:
        first = inputs[0] if isinstance(inputs, tuple) and inputs else None
        if isinstance(first, torch.Tensor) and first.dim() > 0:
            most_rows[0] = max(most_rows[0], int(first.shape[0]))

    handle = torch.nn.modules.module.register_module_forward_hook(count_rows)
    try:
        losses = numbers(fn(*(to_torch(a, j) for j, a in enumerate(args))))
    finally:
        handle.remove()
    return losses, np.array(most_rows[0], dtype=np.int64)
