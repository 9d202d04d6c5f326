"""Exercise 5, autograd from scratch: gate backwards of the lecture's graph and VJP rules.

The oracles are independent of edu_dl's own ops: central differences in float64 (a gradient check)
for the smooth functions, and torch.autograd for relu, whose kink needs PyTorch's convention
relu'(0) = 0.

Judged outside the sandbox: every value against the oracle, and the submitted source, which may
not call the tools that compute the same gradients (``.backward()``, ``torch.autograd``,
``edu_dl.gradcheck``, the rules of ``edu_dl.autograd.ops``, ``edu_dl.models.loss_and_grad``).
The private half: its hints are generic rules or mistake replays; ``edu_dl.harness.ex05`` says
why there is no public code.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from edu_dl.grading.hints import Mistake, NonFinite, Scalar, Transposed
from edu_dl.grading.source import names_check
from edu_dl.grading.spec import Part, tolerance

Array = np.ndarray
Case = tuple[Any, ...]
# Central differences carry ~1e-10 absolute error: compare at 1e-5 relative, 1e-7 absolute.
NUMERIC = tolerance(rtol=1e-5, atol=1e-7)
H = 1e-5
# Every part asks for a VJP rule by hand: the library's own rules give the answer.
BY_HAND_SOURCE = names_check(forbidden=[(
    ("backward", "grad", "gradients", "autograd", "torch", "gradcheck", "ops", "tensor", "Tensor",
     "loss_and_grad"),
    "this part asks you to write the VJP rule yourself, from the local derivative and dout (do "
    "not call .backward(), torch.autograd, edu_dl.gradcheck, edu_dl's ops or "
    "edu_dl.models.loss_and_grad)")])


def numeric_vjp(f: Callable[..., Any], args: tuple[Array, ...], dout: Any,
                wrt: tuple[int, ...]) -> tuple[Array, ...]:
    """d/d args[k] of sum(dout * f(*args)) by central differences, for each k in wrt (float64)."""
    args = tuple(np.array(a, dtype=np.float64) for a in args)
    dout = np.asarray(dout, dtype=np.float64)
    grads = []
    for k in wrt:
        grad = np.zeros_like(args[k])
        for idx in np.ndindex(args[k].shape):
            old = args[k][idx]
            args[k][idx] = old + H
            plus = np.sum(dout * f(*args))
            args[k][idx] = old - H
            minus = np.sum(dout * f(*args))
            args[k][idx] = old
            grad[idx] = (plus - minus) / (2 * H)
        grads.append(grad)
    return tuple(grads)


def _shapes(rng: np.random.Generator, hidden: bool) -> list[tuple[int, ...]]:
    """Small shapes; the hidden ones are drawn, so no shape is learnt by heart."""
    if not hidden:
        return [(2, 3), (4, 1), (3, 5)]
    return [(1, 1), *(tuple(int(d) for d in rng.integers(1, 6, size=2)) for _ in range(3))]


# --------------------------------------------------------------------------- the three gates


def _mul_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    return [(rng.standard_normal(s), rng.standard_normal(s), rng.standard_normal(s))
            for s in _shapes(rng, hidden)]


def _mul_expected(dout: Array, x: Array, y: Array) -> tuple[Array, Array]:
    dx, dy = numeric_vjp(lambda x, y: x * y, (x, y), dout, (0, 1))
    return dx, dy


def _graph_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    return [tuple(rng.standard_normal(s) for _ in range(3)) for s in _shapes(rng, hidden)]


def _graph_expected(x: Array, y: Array, z: Array) -> tuple[Array, Array, Array]:
    """c = sum(x * y + z): the lecture's three-input graph, differentiated numerically."""
    gx, gy, gz = numeric_vjp(lambda x, y, z: np.sum(x * y + z), (x, y, z), 1.0, (0, 1, 2))
    return gx, gy, gz


# --------------------------------------------------------------------------- VJP rules


def _matmul_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    # Non-square shapes, so a transposed gradient cannot have the right shape by accident.
    dims = [(2, 3, 4), (5, 2, 3), (3, 3, 3)] if not hidden else [
        tuple(int(d) for d in rng.integers(1, 6, size=3)) for _ in range(4)]
    return [(rng.standard_normal((n, m)), rng.standard_normal((n, k)), rng.standard_normal((k, m)))
            for n, k, m in dims]


def _matmul_expected(dout: Array, x: Array, w: Array) -> tuple[Array, Array]:
    dx, dw = numeric_vjp(lambda x, w: x @ w, (x, w), dout, (0, 1))
    return dx, dw


def _with_zeros(rng: np.random.Generator, shape: tuple[int, ...]) -> Array:
    x = rng.standard_normal(shape)
    x[rng.random(shape) < 0.3] = 0.0  # relu's kink must be met
    x.flat[0] = 0.0
    return x


def _relu_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    return [(rng.standard_normal(s), _with_zeros(rng, s)) for s in _shapes(rng, hidden)]


def _relu_expected(dout: Array, x: Array) -> Array:
    import torch

    xt = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    torch.relu(xt).backward(torch.tensor(dout, dtype=torch.float64))
    assert xt.grad is not None
    return xt.grad.numpy()


def _reduce_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    return [(float(rng.standard_normal()), rng.standard_normal(s)) for s in _shapes(rng, hidden)]


def _sum_expected(dout: float, x: Array) -> Array:
    return numeric_vjp(np.sum, (x,), dout, (0,))[0]


def _mean_expected(dout: float, x: Array) -> Array:
    return numeric_vjp(np.mean, (x,), dout, (0,))[0]


def _unary_cases(low: float, high: float) -> Callable[[np.random.Generator, bool], list[Case]]:
    def cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
        return [(rng.standard_normal(s), rng.uniform(low, high, s)) for s in _shapes(rng, hidden)]

    return cases


def _exp_expected(dout: Array, x: Array) -> Array:
    return numeric_vjp(np.exp, (x,), dout, (0,))[0]


def _log_expected(dout: Array, x: Array) -> Array:
    return numeric_vjp(np.log, (x,), dout, (0,))[0]


def _softmax_ce_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    sizes = [(4, 3), (2, 5), (3, 4)] if not hidden else [
        tuple(int(d) for d in rng.integers(1, 7, size=2)) for _ in range(3)]
    cases: list[Case] = [(rng.standard_normal((n, c)), rng.integers(0, c, n)) for n, c in sizes]
    n, c = sizes[-1]
    # Logits near 800: exp overflows float64 unless the row maximum is subtracted first.
    cases.append((800.0 + 5.0 * rng.standard_normal((n, c)), rng.integers(0, c, n)))
    return cases


def _ce_loss(logits: Array, y: Array) -> float:
    shifted = logits - logits.max(axis=1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    return float(-log_probs[np.arange(len(y)), y].mean())


def _softmax_ce_expected(logits: Array, y: Array) -> tuple[float, Array]:
    dlogits = numeric_vjp(lambda z: _ce_loss(z, y), (logits,), 1.0, (0,))[0]
    return _ce_loss(logits, y), dlogits


def _softmax(logits: Array) -> Array:
    e = np.exp(logits - logits.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def _matmul_dx_untransposed(e: Any, a: Case) -> Any:
    """dout @ w, where it multiplies (w square in its last two dimensions)."""
    return a[0] @ a[2] if a[0].shape[1] == a[2].shape[0] else None


MATMUL_OTHER = "transpose the other factor: dx = dout @ w.T, dw = x.T @ dout"
MATMUL_SHAPES = ("looks transposed: each gradient has its input's shape; dx = dout @ w.T (NxD) "
                 "and dw = x.T @ dout (DxM)")
GRAPH_SWAP = "grad_x = grad_a * y and grad_y = grad_a * x: the multiply gate swaps its inputs"
CE_LABEL = "dlogits = (softmax(logits) - one_hot(y)) / N: subtract 1 at each row's label"

PARTS = [
    Part(
        id="ex05.mul_backward", points=1, cases=_mul_cases, expected=_mul_expected,
        compare=NUMERIC, arg_names=("dout", "x", "y"), output_names=("dx", "dy"),
        source_check=BY_HAND_SOURCE,
        hints=(
            Mistake(lambda e, a: a[0] * a[1],
                    "dx = dout * y: each input's gradient uses the OTHER input (you used x)",
                    output=0, rtol=1e-5, atol=1e-7),
            Mistake(lambda e, a: a[2],
                    "multiply by dout: the chain rule scales the local gradient y by the "
                    "upstream dout", output=0, rtol=1e-5, atol=1e-7),
        ),
    ),
    Part(
        id="ex05.graph_backward", points=2, cases=_graph_cases, expected=_graph_expected,
        compare=NUMERIC, arg_names=("x", "y", "z"), output_names=("grad_x", "grad_y", "grad_z"),
        source_check=BY_HAND_SOURCE,
        hints=(
            Scalar("grad_z has z's shape: the sum gate sends grad_c = 1 to every element of b, "
                   "and the add gate passes it on unchanged (grad_b = ones_like(b))", output=2),
            Mistake(lambda e, a: a[0], GRAPH_SWAP, output=0, rtol=1e-5, atol=1e-7),
            Mistake(lambda e, a: a[1], GRAPH_SWAP, output=1, rtol=1e-5, atol=1e-7),
        ),
    ),
    Part(
        id="ex05.matmul_backward", points=2, cases=_matmul_cases, expected=_matmul_expected,
        compare=NUMERIC, arg_names=("dout", "x", "w"), output_names=("dx", "dw"),
        source_check=BY_HAND_SOURCE,
        hints=(
            Transposed(MATMUL_SHAPES, output=0),
            Transposed(MATMUL_SHAPES, output=1),
            Mistake(_matmul_dx_untransposed, MATMUL_OTHER, output=0, rtol=1e-5, atol=1e-7),
            Mistake(lambda e, a: a[0].T @ a[1], MATMUL_OTHER, output=1, rtol=1e-5, atol=1e-7),
        ),
    ),
    Part(
        id="ex05.relu_backward", points=1, cases=_relu_cases, expected=_relu_expected,
        arg_names=("dout", "x"), source_check=BY_HAND_SOURCE,
        hints=(
            Mistake(lambda e, a: a[0] * (a[1] >= 0),
                    "at x == 0 you let the gradient through: take relu'(0) = 0 as PyTorch does "
                    "(mask with x > 0, not x >= 0)", rtol=1e-5, atol=1e-7),
            Mistake(lambda e, a: a[0],
                    "you passed dout through unchanged: multiply it by the mask (x > 0)",
                    rtol=1e-5, atol=1e-7),
            Mistake(lambda e, a: a[1] > 0,
                    "that is the local gradient only: multiply the mask by dout",
                    rtol=1e-5, atol=1e-7),
        ),
    ),
    Part(
        id="ex05.sum_backward", points=1, cases=_reduce_cases, expected=_sum_expected,
        compare=NUMERIC, arg_names=("dout", "x"), source_check=BY_HAND_SOURCE,
        hints=(Scalar("the gradient has x's shape: every element gets dout "
                      "(dout * ones_like(x))"),),
    ),
    Part(
        id="ex05.mean_backward", points=1, cases=_reduce_cases, expected=_mean_expected,
        compare=NUMERIC, arg_names=("dout", "x"), source_check=BY_HAND_SOURCE,
        hints=(
            Mistake(lambda e, a: a[0] * np.ones_like(a[1]),
                    "the mean divides by the number of elements: dx = dout * ones_like(x) / "
                    "x.size", rtol=1e-5, atol=1e-7),
            Scalar("the gradient has x's shape: dout / x.size in every entry"),
        ),
    ),
    Part(
        id="ex05.exp_backward", points=1, cases=_unary_cases(-2.0, 2.0), expected=_exp_expected,
        compare=NUMERIC, arg_names=("dout", "x"), source_check=BY_HAND_SOURCE,
        hints=(Mistake(lambda e, a: np.exp(a[1]),
                       "that is exp'(x) alone: multiply by dout (the chain rule)",
                       rtol=1e-5, atol=1e-7),),
    ),
    Part(
        id="ex05.log_backward", points=1, cases=_unary_cases(0.5, 3.0), expected=_log_expected,
        compare=NUMERIC, arg_names=("dout", "x"), source_check=BY_HAND_SOURCE,
        hints=(
            Mistake(lambda e, a: a[0] * np.log(a[1]),
                    "the derivative of log x is 1 / x, not log x", rtol=1e-5, atol=1e-7),
            Mistake(lambda e, a: 1 / a[1],
                    "that is log'(x) alone: multiply by dout (the chain rule)",
                    rtol=1e-5, atol=1e-7),
        ),
    ),
    Part(
        id="ex05.softmax_cross_entropy", points=2, cases=_softmax_ce_cases,
        expected=_softmax_ce_expected, compare=tolerance(rtol=1e-5, atol=1e-6),
        arg_names=("logits", "y"), output_names=("loss", "dlogits"),
        source_check=BY_HAND_SOURCE,
        hints=(
            NonFinite("inf or nan: subtract each row's maximum from the logits before exp (it "
                      "changes nothing mathematically and keeps exp from overflowing)"),
            Mistake(lambda e, a: len(a[1]) * e[1],
                    "the loss is a MEAN over the batch: divide the gradient by N",
                    output=1, rtol=1e-5, atol=1e-7),
            Mistake(lambda e, a: _softmax(a[0]) / len(a[1]), CE_LABEL, output=1,
                    rtol=1e-5, atol=1e-7),
            Mistake(lambda e, a: _softmax(a[0]), CE_LABEL, output=1, rtol=1e-5, atol=1e-7),
        ),
    ),
]
