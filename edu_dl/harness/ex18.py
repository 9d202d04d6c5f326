"""Exercise 18 (attention), public half: how its parts call a student's function, and the source
check of the backward pass. Nothing here computes an answer: the oracles (``edu_dl.attention``'s
autograd version for the backward pass; the merge worked out from the keys' scores), the hidden
cases and the mistake replays stay in the course's private part file.

Both functions get float64 copies and plain Python flags; the guard watches the copies
(``edu_dl.grading.authoring.guard.watch``), so a function that writes into one (``q *= scale``)
fails as one that writes into the case does.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from edu_dl.grading.authoring import guard
from edu_dl.grading.authoring.source import names_check

Case = tuple[Any, ...]


def _float64(*arrays: Any) -> list[np.ndarray]:
    """Float64 copies of the case's first arrays, each watched as the argument it stands for."""
    return [guard.watch(j, np.array(a, dtype=np.float64)) for j, a in enumerate(arrays)]


def call_merge(fn: Callable[..., Any], args: Case) -> Any:
    """merge_partials(m1, l1, o1, m2, l2, o2) on float64 copies."""
    return fn(*_float64(*args))


def call_tiles(fn: Callable[..., Any], args: Case) -> Any:
    """causal_tiles(n, block_q, block_k) with Python ints."""
    return fn(*(int(a) for a in args))


def call_backward(fn: Callable[..., Any], args: Case) -> Any:
    """attention_backward(q, k, v, dout, causal) on float64 copies, causal a Python bool."""
    q, k, v, dout, causal = args
    return fn(*_float64(q, k, v, dout), bool(causal))


# The backward pass is derived by hand: an autograd engine asked for it scores nothing.
BY_HAND = names_check(forbidden=[(
    ("torch", "jax", "tensor", "Tensor", "requires_grad", "backward", "grad", "autograd",
     "gradcheck", "vjp", "edu_dl", "ed", "attention"),
    "the function asks an autograd engine (torch, edu_dl, jax) for the gradients: derive dq, "
    "dk and dv yourself with NumPy")])
