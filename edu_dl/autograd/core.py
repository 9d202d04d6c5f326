"""What the eager and the static engine share: the order, the backward loop, operands, errors.

``toposort`` orders a graph (HIPS autograd's ``toposort``, iterative); ``backward`` is micrograd's
loop over that order. The eager engine runs the loop on arrays (``tensor.py``); the static one runs
the very same loop on names while compiling a plan, and so writes it out as code (``codegen.py``).
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Hashable, Iterable, Sequence
from types import ModuleType
from typing import Any, TypeVar

import numpy as np

from edu_dl import backend

N = TypeVar("N", bound=Hashable)  # a node of some graph: a Tensor, or a static-graph Node
G = TypeVar("G")  # a gradient: an array (eager) or the name of one (a compiled plan)


def toposort(roots: Iterable[N], parents: Callable[[N], Iterable[N]]) -> list[N]:
    """Every node reachable from ``roots``, each after all of its parents (inputs first).

    A depth-first search with an explicit stack: a recursive one hits Python's recursion limit
    on a long unrolled graph. A node without parents (an empty ``parents(node)``) is placed as
    soon as it is seen, without a stack entry of its own.
    """
    order: list[N] = []
    seen: set[N] = set()
    for root in roots:
        if root in seen:
            continue
        seen.add(root)
        stack = [(root, iter(parents(root)))]
        while stack:
            node, todo = stack[-1]
            for parent in todo:
                if parent not in seen:
                    seen.add(parent)
                    grandparents = parents(parent)
                    if grandparents:
                        stack.append((parent, iter(grandparents)))
                        break
                    order.append(parent)  # a leaf: nothing goes before it
            else:  # every parent is placed: so is node
                stack.pop()
                order.append(node)
    return order


def backward(
    order: Sequence[N],
    grads: dict[N, G],
    vjp: Callable[[N, G], Iterable[tuple[N, G]]],
    add: Callable[[G, G], G] = operator.add,
) -> None:
    """Reverse-mode accumulation: micrograd's loop.

    ``order`` is topological (``toposort``), ``grads`` holds the seeds, and ``vjp(node, grad)``
    gives each parent of ``node`` its share of ``grad`` (None: that parent needs none). Walking
    the order in reverse, a node is reached after every node it feeds, so its gradient is
    complete; a parent used twice gets the sum of both contributions.
    """
    for node in reversed(order):
        grad = grads.pop(node, None)
        if grad is None:
            continue  # nothing flows back through node (a constant, or an unused branch)
        for parent, parent_grad in vjp(node, grad):
            if parent_grad is not None:
                grads[parent] = add(grads[parent], parent_grad) if parent in grads else parent_grad


# --------------------------------------------------------------------------- operands

_PYTHON_NUMBERS = (bool, int, float, complex)


def operand(x: Any, like: Any, xp: ModuleType) -> Any:
    """A non-node operand as an array of namespace ``xp``, promoted as NumPy 2 promotes (NEP 50).

    A Python number is "weak": it takes the dtype NumPy would give it next to an array of dtype
    ``like`` (float32 stays float32 with 2.5; a bool array with 5 becomes int64). Lists become
    arrays; arrays and NumPy scalars pass as they are; anything else is a TypeError.
    """
    if type(x) in _PYTHON_NUMBERS:
        dtype = None if like is None else np.result_type(like, x)
        return xp.asarray(x, dtype=dtype)
    if isinstance(x, list | tuple):
        return xp.asarray(x)
    backend.namespace_of(x)  # a clear TypeError for anything that is not an array
    return x


# --------------------------------------------------------------------------- errors


def op_error(exc: Exception, name: str, arrays: Sequence[Any], node: str | None = None
             ) -> Exception:
    """``exc`` again, naming the op and its input shapes (and the graph node that ran it).

    The one place errors are named, for both engines: ``matmul with input shapes (2, 3), (4, 5):
    ...`` eagerly or while a graph is built, ``Session.run: node 'MatMul' (matmul with ...)
    failed: ...`` when a Session runs it.
    """
    shapes = ", ".join(str(tuple(getattr(a, "shape", ()))) for a in arrays)
    what = f"{name} with input shapes {shapes}"
    message = str(exc)
    if node is not None:
        return type(exc)(f"Session.run: node '{node}' ({what}) failed: {message}")
    if message.startswith(name + ":"):  # the op's own message names it already
        return exc
    return type(exc)(f"{what}: {message}")
