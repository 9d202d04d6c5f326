"""Exercise 14 (compiling dynamic code), public half: how its parts call a student's function and
the source check. Nothing here computes an answer.

``call_clipped`` passes NumPy copies of the case's arrays, so a function written with JAX (or
``torch.func``) meets the same inputs as one written with NumPy, and hands back float64 NumPy
arrays whatever the library returned. ``call_one_graph`` runs the student's function under
``torch.compile(fullgraph=True)`` with TorchDynamo's capture only (``backend="eager"``, no C++
compiler needed), so a graph break fails the call and names its line; what the grader judges
outside the sandbox is the source: ``settle`` decides nothing in Python (``NoPythonDecisions``).
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from edu_dl.grading.authoring import guard
from edu_dl.grading.authoring.source import definition_node, names_check
from edu_dl.grading.authoring.spec import CheckFailure, Verdict

Case = tuple[Any, ...]


def _float64(value: Any, what: str, shape: tuple[int, ...]) -> np.ndarray:
    """``value`` (a JAX, PyTorch or NumPy array) as float64 NumPy, of ``shape`` or a clear
    failure."""
    if hasattr(value, "detach"):  # a torch tensor
        value = value.detach().cpu().numpy()
    try:
        array = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise CheckFailure(f"{what} is not an array of numbers ({type(value).__name__}): "
                           f"{exc}") from None
    if array.shape != shape:
        raise CheckFailure(f"{what} has shape {array.shape}; it must have the shape {shape}")
    return array


def call_clipped(fn: Callable[..., Any], args: Case) -> tuple[np.ndarray, np.ndarray]:
    """fn(w1, w2, X, Y, max_norm) on copies (watched by the guard); its (g1, g2) as float64
    arrays of w1's and w2's shapes."""
    w1, w2, X, Y, max_norm = args
    result = fn(*(guard.watch(j, np.array(a, dtype=np.float64))
                  for j, a in enumerate((w1, w2, X, Y))), float(max_norm))
    if not isinstance(result, tuple | list) or len(result) != 2:
        raise CheckFailure(f"return a pair (g1, g2), one array per weight; got "
                           f"{type(result).__name__}")
    return (_float64(result[0], "g1", np.shape(w1)), _float64(result[1], "g2", np.shape(w2)))


VMAP_SOURCE = names_check(required=[
    (("vmap",), "the per-example gradients are not computed with vmap: write the gradient of "
                "ONE example's loss (jax.grad) and let jax.vmap run it over the batch"),
])


def call_one_graph(fn: Callable[..., Any], args: Case) -> tuple[np.ndarray, np.ndarray]:
    """fn(x, W, tol, max_steps) on float64 tensors, run once as it is and then compiled with
    fullgraph=True (TorchDynamo's capture, run eagerly); the compiled call's (h, steps) as NumPy
    arrays. A graph break fails the call with the line TorchDynamo names."""
    import torch
    import torch._dynamo

    x, W, tol, max_steps = args

    def arguments() -> tuple[Any, ...]:  # fresh tensors for each call, watched by the guard
        return (guard.watch(0, torch.tensor(x, dtype=torch.float64)),
                guard.watch(1, torch.tensor(W, dtype=torch.float64)), float(tol), int(max_steps))

    # Eagerly first: the stub's NotImplementedError, and any error of the student's code, then
    # show as themselves rather than as what TorchDynamo makes of them.
    fn(*arguments())
    torch._dynamo.reset()  # every case captured afresh: no graph of another shape reused
    compiled = torch.compile(fn, fullgraph=True, backend="eager")
    try:
        result = compiled(*arguments())
    except torch._dynamo.exc.Unsupported as exc:
        raise CheckFailure(f"TorchDynamo breaks the graph: {_graph_break(str(exc))}") from None
    if not isinstance(result, tuple | list) or len(result) != 2:
        raise CheckFailure(f"return a pair (h, steps); got {type(result).__name__}")
    h = _float64(result[0], "h", np.shape(x))
    steps = _float64(result[1], "steps", (np.shape(x)[0],))
    return h, steps


def _graph_break(message: str) -> str:
    """The first line of TorchDynamo's message and the line of code it names."""
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    where = next((line.split("code: ", 1)[1] for line in lines if "code: " in line), None)
    if where is None:  # the user-code frame follows "from user code:"
        after = [i for i, line in enumerate(lines) if line.startswith("from user code")]
        where = lines[after[0] + 2] if after and after[0] + 2 < len(lines) else None
    first = lines[0] if lines else "(no message)"
    return f"{first}, at `{where}`" if where else first


# Statements that decide in Python, and calls that bring a tensor's value into Python: while
# TorchDynamo traces, a tensor has no value yet, so each one on a tensor is a graph break.
_DECISIONS = {ast.If: "an `if`", ast.IfExp: "an `... if ... else ...`", ast.While: "a `while`",
              ast.Break: "a `break`", ast.Assert: "an `assert`"}
_TO_PYTHON = ("item", "tolist", "numpy", "bool")


@dataclass(frozen=True)
class NoPythonDecisions:
    """A source check: the function has no ``if``, conditional expression, ``while``, ``break``
    or ``assert``, and calls no ``.item()``, ``.tolist()``, ``.numpy()`` or ``bool()``: every
    choice stays inside the graph (masks, ``torch.where``). Data only."""

    def __call__(self, source: str) -> Verdict:
        for node in ast.walk(definition_node(source)):
            kind = _DECISIONS.get(type(node))
            if kind is None and isinstance(node, ast.Call):
                called = node.func.attr if isinstance(node.func, ast.Attribute) else (
                    node.func.id if isinstance(node.func, ast.Name) else "")
                kind = f"a call of {called}()" if called in _TO_PYTHON else None
            if kind is not None:
                return Verdict(False, f"line {getattr(node, 'lineno', '?')} of the function has "
                                      f"{kind}: a choice made in Python needs a tensor's value "
                                      "while TorchDynamo traces (a graph break); keep every "
                                      "row's choice in the graph, with a mask and torch.where")
        return Verdict(True)


NO_PYTHON_DECISIONS = NoPythonDecisions()
