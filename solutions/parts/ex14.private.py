"""Exercise 14, compiling dynamic code: DP-SGD's clipped gradient from per-example gradients
(``vmap`` of ``grad``), and an iteration whose rows stop at their own step written as ONE graph
for TorchDynamo (no data-dependent ``if``).

Oracles: NumPy in float64 (the two-layer net's gradient by hand, one example at a time; the
iteration row by row, with Python's ``if``). Judged outside the sandbox: every value, and the
source: the clipped gradient uses ``vmap``; ``settle`` decides nothing in Python (no ``if``,
``while``, ``break``, ``.item()``, ...). That TorchDynamo really captured ``settle`` as one graph is
check()'s feedback (``call_one_graph`` fails the call on a graph break, inside the sandbox).

The private half: ``edu_dl.harness.ex14`` holds the public calls and the source check.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from edu_dl.grading.authoring.hints import Mistake
from edu_dl.grading.authoring.spec import Part, tolerance
from edu_dl.harness.ex14 import NO_PYTHON_DECISIONS, VMAP_SOURCE, call_clipped, call_one_graph

Array = np.ndarray
Case = tuple[Any, ...]
CLOSE = tolerance(rtol=1e-7, atol=1e-10)  # float64 sums in another order


# --------------------------------------------------------------------------- clipped gradient


def _per_example(w1: Array, w2: Array, X: Array, Y: Array) -> tuple[Array, Array]:
    """Each example's gradient of sum((relu(x @ w1) @ w2 - y)^2): shapes (N, *w1) and (N, *w2)."""
    pre = X @ w1                       # (N, H)
    h = np.maximum(pre, 0.0)
    d_out = 2.0 * (h @ w2 - Y)         # (N, D_out)
    g2 = h[:, :, None] * d_out[:, None, :]
    d_pre = (d_out @ w2.T) * (pre > 0)  # (N, H)
    g1 = X[:, :, None] * d_pre[:, None, :]
    return g1, g2


def _norms(g1: Array, g2: Array) -> Array:
    return np.sqrt((g1**2).sum(axis=(1, 2)) + (g2**2).sum(axis=(1, 2)))


def _scale(norms: Array, max_norm: float) -> Array:
    return np.minimum(1.0, max_norm / np.maximum(norms, 1e-300))


def _clipped(w1: Array, w2: Array, X: Array, Y: Array, max_norm: float) -> tuple[Array, Array]:
    g1, g2 = _per_example(w1, w2, X, Y)
    s = _scale(_norms(g1, g2), max_norm)[:, None, None]
    return (s * g1).mean(axis=0), (s * g2).mean(axis=0)


def _clipped_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    """Small nets; max_norm between the smallest and the largest per-example norm, so that
    some examples are clipped and some are not (one case clips none, one clips all).

    One shape per draw (visible: N, D_in, H, D_out all different, so a swapped axis fails; hidden:
    drawn): JAX compiles each primitive of a vmap'd grad once per shape, 2-4 s on a 2-core
    machine, so eight shapes made the check cell (visible and hidden) take about 30 s, half the
    grader's per-cell timeout; two shapes take a few seconds (issue 43)."""
    shape = (5, 3, 4, 2)
    quantiles = (1e-3, 0.5, 0.3, 1e9)  # first the case that tells every mistake apart
    if hidden:
        shape = (int(rng.integers(2, 9)), int(rng.integers(1, 6)), int(rng.integers(1, 7)),
                 int(rng.integers(1, 4)))
        quantiles = (0.25, 0.5, 0.75, 0.4)
    cases: list[Case] = []
    for quantile in quantiles:
        n, d_in, h, d_out = shape
        while True:  # no example whose ReLUs are all off: its gradient would be zero
            w1 = rng.standard_normal((d_in, h)) * np.sqrt(2.0 / d_in)
            w2 = rng.standard_normal((h, d_out)) * np.sqrt(2.0 / h)
            X = rng.standard_normal((n, d_in))
            Y = rng.standard_normal((n, d_out))
            norms = _norms(*_per_example(w1, w2, X, Y))
            if norms.min() > 1e-3:
                break
        if quantile >= 1.0:  # above every norm: nothing is clipped
            max_norm = float(norms.max() * 2 + 1)
        elif quantile < 0.01:  # below every norm, the mean's too: everything is clipped, and
            g1, g2 = _per_example(w1, w2, X, Y)  # clipping the mean instead is told apart
            mean_norm = np.sqrt((g1.mean(axis=0) ** 2).sum() + (g2.mean(axis=0) ** 2).sum())
            max_norm = float(min(norms.min(), mean_norm) / 2)
        else:
            max_norm = float(np.quantile(norms, quantile))
        cases.append((w1, w2, X, Y, max_norm))
    return cases


def _batch_gradient(a: Case) -> tuple[Array, Array]:
    g1, g2 = _per_example(*a[:4])
    return g1.sum(axis=0), g2.sum(axis=0)


def _unless_right(value: tuple[Array, Array], e: Any) -> tuple[Array, Array] | None:
    """The mistake's result, or None where it gives the right answer on this case."""
    same = all(np.allclose(v, x, rtol=1e-9, atol=1e-12) for v, x in zip(value, e, strict=True))
    return None if same else value


def _mean_unclipped(e: Any, a: Case) -> tuple[Array, Array] | None:
    g1, g2 = _per_example(*a[:4])
    return _unless_right((g1.mean(axis=0), g2.mean(axis=0)), e)


def _clip_after_mean(e: Any, a: Case) -> tuple[Array, Array] | None:
    g1, g2 = _per_example(*a[:4])
    m1, m2 = g1.mean(axis=0), g2.mean(axis=0)
    s = float(_scale(np.array([np.sqrt((m1**2).sum() + (m2**2).sum())]), a[4])[0])
    return _unless_right((s * m1, s * m2), e)


def _clip_each_array(e: Any, a: Case) -> tuple[Array, Array] | None:
    g1, g2 = _per_example(*a[:4])
    s1 = _scale(np.sqrt((g1**2).sum(axis=(1, 2))), a[4])[:, None, None]
    s2 = _scale(np.sqrt((g2**2).sum(axis=(1, 2))), a[4])[:, None, None]
    return _unless_right(((s1 * g1).mean(axis=0), (s2 * g2).mean(axis=0)), e)


def _all_to_max_norm(e: Any, a: Case) -> tuple[Array, Array] | None:
    g1, g2 = _per_example(*a[:4])
    s = (a[4] / np.maximum(_norms(g1, g2), 1e-300))[:, None, None]
    return _unless_right(((s * g1).mean(axis=0), (s * g2).mean(axis=0)), e)


def _summed(e: Any, a: Case) -> tuple[Array, Array] | None:
    n = a[2].shape[0]
    return None if n == 1 else (e[0] * n, e[1] * n)


CLIPPED_HINTS = (
    Mistake(lambda e, a: _unless_right(_batch_gradient(a), e),
            "that is the batch gradient (the sum of the examples' gradients, unclipped): clip "
            "each example's own gradient, then average", rtol=1e-7, atol=1e-10),
    Mistake(_mean_unclipped,
            "that is the mean of the unclipped gradients: scale down each example's gradient "
            "whose norm exceeds max_norm before averaging", rtol=1e-7, atol=1e-10),
    Mistake(_clip_after_mean,
            "you clipped the averaged gradient: DP-SGD clips each example's gradient BEFORE "
            "averaging, so that no single example can move the weights by more than max_norm / N",
            rtol=1e-7, atol=1e-10),
    Mistake(_clip_each_array,
            "w1's and w2's parts were clipped with their own norms: an example's norm is ONE "
            "number, the square root of the sum of squares over both arrays",
            rtol=1e-7, atol=1e-10),
    Mistake(_all_to_max_norm,
            "every example's gradient was scaled to norm max_norm, the small ones too: scale by "
            "min(1, max_norm / norm), which leaves a gradient shorter than max_norm alone",
            rtol=1e-7, atol=1e-10),
    Mistake(_summed,
            "N times too large: average the clipped gradients over the N examples, do not sum "
            "them", rtol=1e-7, atol=1e-10),
)


# --------------------------------------------------------------------------- one graph


def _settle(x: Array, W: Array, tol: float, max_steps: int, together: bool = False,
            keep_old: bool = False, ignore_tol: bool = False) -> tuple[Array, Array]:
    """Row by row with Python's if (the contract); the flags replay typical mistakes: rows that
    stop together, a settled row that keeps the previous state, no stopping at all."""
    h = np.zeros_like(x)
    steps = np.zeros(x.shape[0])
    done = np.zeros(x.shape[0], dtype=bool)
    for _ in range(int(max_steps)):
        h_new = np.tanh(h @ W + x)
        settled = np.abs(h_new - h).max(axis=1) < tol
        if ignore_tol:
            settled[:] = False
        if together:
            settled[:] = bool(settled[~done].all()) if (~done).any() else True
        live = ~done
        new_h = np.where((live & settled & keep_old)[:, None], h, h_new)
        h = np.where(live[:, None], new_h, h)
        steps += live
        done |= settled
        if done.all():
            break
    return h, steps


def _settle_expected(x: Array, W: Array, tol: float, max_steps: int) -> tuple[Array, Array]:
    return _settle(x, W, tol, max_steps)




def _margin(x: Array, W: Array, tol: float, max_steps: int) -> float:
    """How close any row's change comes to tol (relative): a case on the edge is redrawn."""
    h = np.zeros_like(x)
    closest = np.inf
    for _ in range(int(max_steps)):
        h_new = np.tanh(h @ W + x)
        change = np.abs(h_new - h).max(axis=1)
        closest = min(closest, float(np.min(np.abs(change - tol) / tol)))
        h = h_new
    return closest


def _settle_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    """Rows of different sizes settle at different steps; some hit max_steps."""
    dims = [(4, 3, 1e-4, 12), (5, 2, 1e-6, 8), (1, 4, 1e-3, 10), (3, 3, 0.5, 6)]
    if hidden:
        dims = [(int(rng.integers(2, 7)), int(rng.integers(1, 5)),
                 float(10.0 ** rng.uniform(-6, -2)), int(rng.integers(4, 16)))
                for _ in range(3)]
    cases: list[Case] = []
    for rows, width, tol, max_steps in dims:
        while True:
            W = 0.4 * rng.standard_normal((width, width)) / np.sqrt(width)
            x = rng.standard_normal((rows, width)) * rng.uniform(0.01, 2.0, size=(rows, 1))
            if _margin(x, W, tol, max_steps) > 1e-6:
                break
        cases.append((x, W, tol, max_steps))
    return cases


def _steps_unless_right(steps: Array, e: Any) -> Array | None:
    return None if np.array_equal(steps, e[1]) else steps


def _kept_old_state(e: Any, a: Case) -> Array | None:
    h = _settle(a[0], a[1], a[2], a[3], keep_old=True)[0]
    return None if np.allclose(e[0], h, rtol=1e-9, atol=1e-12) else h


SETTLE_HINTS = (
    Mistake(lambda e, a: _steps_unless_right(_settle(a[0], a[1], a[2], a[3], together=True)[1], e),
            "your rows stop together: each row stops at its OWN step (keep a mask of the rows "
            "that are done, and torch.where to leave their h and steps alone)",
            output=1, rtol=0.0, atol=0.0),
    Mistake(lambda e, a: _steps_unless_right(np.full(a[0].shape[0], float(a[3])), e),
            "every row ran max_steps steps: a row stops after the first step whose largest "
            "change |h_new - h| is below tol", output=1, rtol=0.0, atol=0.0),
    Mistake(lambda e, a: _steps_unless_right(np.maximum(e[1] - 1, 0), e),
            "one step short: steps counts the steps a row ran, the one that settled it included",
            output=1, rtol=0.0, atol=0.0),
    Mistake(_kept_old_state,
            "a settled row keeps the state of its last step (h_new), not the one before",
            output=0, rtol=1e-9, atol=1e-12),
)


PARTS = [
    Part(
        id="ex14.clipped_gradient", points=3, cases=_clipped_cases, expected=_clipped,
        compare=CLOSE, call=call_clipped, source_check=VMAP_SOURCE,
        arg_names=("w1", "w2", "X", "Y", "max_norm"), output_names=("g1", "g2"),
        hints=CLIPPED_HINTS, timeout_s=60.0,
    ),
    Part(
        id="ex14.settle_one_graph", points=3, cases=_settle_cases, expected=_settle_expected,
        compare=CLOSE, call=call_one_graph, source_check=NO_PYTHON_DECISIONS,
        arg_names=("x", "W", "tol", "max_steps"),
        output_names=("h", "steps"), hints=SETTLE_HINTS, timeout_s=120.0,
    ),
]
