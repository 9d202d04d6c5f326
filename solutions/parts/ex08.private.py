"""Exercise 8, autograd from scratch: a tape engine, BatchNorm and dropout, judged on contracts.

The oracles are independent of edu_dl's own ops and of the student's code: torch.autograd in
float64 for every gradient (relu with PyTorch's relu'(0) = 0, BatchNorm through
``torch.nn.functional.batch_norm``, which also updates the running averages), central
differences for the warm-up gates, and for dropout the contract itself (the mask is the seed's
uniform draws >= p, so it is one NumPy expression). Programs for the engine are drawn at grading
time from the grader's secret: random op sequences in which some value is always used twice.

Judged outside the sandbox: every value against the oracle, and the submitted source, which may
not call the tools that compute the same gradients (``edu_dl.harness.ex08.BY_HAND``). The
adapters that drive a student's ``Tape`` and ``backward`` and refuse writes into inputs are
public (``edu_dl.harness.ex08``); the hints here are generic rules or mistake replays, frozen
to data by ``edu-dl assign``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from edu_dl.grading.authoring.hints import (
    EqualsArgument,
    Mistake,
    NonFinite,
    Scalar,
    Scaled,
    Transposed,
    close,
)
from edu_dl.grading.authoring.source import all_checks, names_check, speed_rules
from edu_dl.grading.authoring.spec import Part, tolerance
from edu_dl.harness.ex08 import (
    BY_HAND,
    LINEAR,
    NO_LIBRARY_LAYER,
    SIN,
    TANH,
    call_backward,
    call_leaving_inputs,
    call_tape_op,
    call_unbroadcast,
    record_program,
)
from edu_dl.harness.ex11 import OtherShape
from edu_dl.speed.tasks import CALLS_THE_REFERENCE, TASKS

Array = np.ndarray
Case = tuple[Any, ...]
# Central differences carry ~1e-10 absolute error: compare at 1e-5 relative, 1e-7 absolute.
NUMERIC = tolerance(rtol=1e-5, atol=1e-7)
# torch.autograd in float64 against NumPy in float64: only summation orders differ.
EXACT64 = tolerance(rtol=1e-7, atol=1e-9)
TOL: dict[str, Any] = {"rtol": 1e-7, "atol": 1e-9}  # the hints' closeness, the same
H = 1e-5


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


def unless_right(expected: Any, wrong: Any) -> Any:
    """A replay's value, or None where the mistake gives the right answer (no hint then)."""
    if isinstance(expected, tuple) and isinstance(wrong, tuple):
        return None if all(close(e, w, **TOL) for e, w in zip(expected, wrong)) else wrong
    return None if close(expected, wrong, **TOL) else wrong


def _torch(*arrays: Any) -> list[Any]:
    import torch

    return [torch.tensor(np.asarray(a, dtype=np.float64), requires_grad=True) for a in arrays]


def _numpy(t: Any) -> Array:
    return t.detach().numpy().copy()


def _shapes(rng: np.random.Generator, hidden: bool) -> list[tuple[int, ...]]:
    """Small shapes; the hidden ones are drawn, so no shape is learnt by heart."""
    if not hidden:
        return [(2, 3), (4, 1), (3, 5)]
    return [(1, 1), *(tuple(int(d) for d in rng.integers(1, 6, size=2)) for _ in range(3))]


def _with_zeros(rng: np.random.Generator, shape: tuple[int, ...]) -> Array:
    x = rng.standard_normal(shape)
    x[rng.random(shape) < 0.3] = 0.0  # relu's kink must be met
    x.flat[0] = 0.0
    return x


# --------------------------------------------------------------------------- warm-up gates


def _mul_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    return [(rng.standard_normal(s), rng.standard_normal(s), rng.standard_normal(s))
            for s in _shapes(rng, hidden)]


def _mul_expected(dout: Array, x: Array, y: Array) -> tuple[Array, Array]:
    dx, dy = numeric_vjp(lambda x, y: x * y, (x, y), dout, (0, 1))
    return dx, dy


def _relu_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    return [(rng.standard_normal(s), _with_zeros(rng, s)) for s in _shapes(rng, hidden)]


def _relu_expected(dout: Array, x: Array) -> Array:
    import torch

    (xt,) = _torch(x)
    torch.relu(xt).backward(torch.tensor(dout, dtype=torch.float64))
    assert xt.grad is not None
    return _numpy(xt.grad)


# --------------------------------------------------------------------------- unbroadcast


def _broadcast_pair(rng: np.random.Generator) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(the broadcast gradient's shape, the input's shape): leading axes dropped, some set to 1."""
    full = tuple(int(d) for d in rng.integers(2, 5, size=int(rng.integers(1, 4))))
    kept = full[int(rng.integers(0, len(full) + 1)):]
    small = tuple(1 if rng.random() < 0.5 else d for d in kept)
    return full, small


def _unbroadcast_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    pairs = [((4, 3), (3,)), ((2, 3, 4), (3, 1)), ((2, 5), (2, 5)), ((2, 3), ()),
             ((3, 1, 4), (1, 1, 4))]
    if hidden:
        pairs = [_broadcast_pair(rng) for _ in range(5)]
    return [(rng.standard_normal(full), np.zeros(small)) for full, small in pairs]


def _unbroadcast_expected(grad: Array, like: Any) -> Array:
    import torch

    (x,) = _torch(np.zeros(np.shape(like)))

    x.expand(grad.shape).backward(torch.tensor(grad, dtype=torch.float64))
    assert x.grad is not None
    return _numpy(x.grad)


def _leading_only(e: Any, a: Case) -> Any:
    grad, like = a
    return unless_right(e, grad.sum(axis=tuple(range(grad.ndim - np.ndim(like)))))


def _averaged(e: Any, a: Case) -> Any:
    return unless_right(e, e * np.size(e) / a[0].size)


UNBROADCAST_SHAPE = ("the result must have exactly `shape`: sum over the leading axes broadcasting "
                     "added, and over every axis where `shape` has 1 (keep those axes, size 1)")

# --------------------------------------------------------------------------- the tape's ops


def _op_case(rng: np.random.Generator, op: str, shape: tuple[int, ...],
             other: tuple[int, ...] | None = None) -> Case:
    if op == "matmul":
        n, k, m = shape
        return (op, rng.standard_normal((n, m)), rng.standard_normal((n, k)),
                rng.standard_normal((k, m)))
    if op in ("sum", "mean"):
        return (op, float(rng.standard_normal()), rng.standard_normal(shape))
    if op in ("add", "mul"):
        assert other is not None
        out = np.broadcast_shapes(shape, other)
        return (op, rng.standard_normal(out), rng.standard_normal(shape),
                rng.standard_normal(other))
    x = {"log": rng.uniform(0.5, 3.0, shape), "relu": _with_zeros(rng, shape)}.get(
        op, rng.uniform(-2.0, 2.0, shape))
    return (op, rng.standard_normal(shape), x)


def _tape_op_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    if not hidden:
        return [_op_case(rng, "add", (3, 4), (4,)), _op_case(rng, "mul", (2, 3), (2, 1)),
                _op_case(rng, "matmul", (2, 3, 4)), _op_case(rng, "exp", (3, 2)),
                _op_case(rng, "log", (2, 3)), _op_case(rng, "relu", (4, 3)),
                _op_case(rng, "sum", (3, 4)), _op_case(rng, "mean", (2, 5))]

    def dims(n: int) -> tuple[int, ...]:
        return tuple(int(d) for d in rng.integers(2, 6, size=n))

    full = dims(2)
    return [_op_case(rng, "add", (1, full[1]), full), _op_case(rng, "mul", full, (full[1],)),
            _op_case(rng, "add", full, full), _op_case(rng, "matmul", dims(3)),
            *(_op_case(rng, op, dims(2)) for op in ("exp", "log", "relu", "sum", "mean"))]


def _tape_op_expected(op: str, dout: Any, *inputs: Array) -> tuple[Any, ...]:
    import torch

    ts = _torch(*inputs)
    ops: dict[str, Callable[..., Any]] = {"add": lambda a, b: a + b, "mul": lambda a, b: a * b,
                                   "matmul": lambda a, b: a @ b, "exp": torch.exp,
                                   "log": torch.log, "relu": torch.relu, "sum": torch.sum,
                                   "mean": torch.mean}
    out = ops[str(op)](*ts)
    out.backward(torch.tensor(dout, dtype=torch.float64))
    return (_numpy(out), *(_numpy(t.grad) for t in ts))


def _on(op: str, replay: Callable[[Case], Any]) -> Callable[[Any, Case], Any]:
    """A mistake that only exists for one op: its replay on that op's cases, else None."""
    def value(e: Any, a: Case) -> Any:
        return unless_right(e[1], replay(a)) if str(a[0]) == op else None

    return value


def _is(*ops: str) -> Callable[[Any, Case], bool]:
    return lambda e, a: str(a[0]) in ops


TAPE_SHAPES = ("each gradient has its input's shape: where the forward pass broadcast an input, "
               "its vjp must sum the gradient back (unbroadcast)")

# --------------------------------------------------------------------------- backward replay


def _program_case(rng: np.random.Generator, n_leaves: int, n_ops: int, width: int) -> Case:
    rows, coeffs = [], []
    for k in range(n_ops):
        code = int(rng.integers(0, 3))
        i, j = (int(v) for v in rng.integers(0, n_leaves + k, size=2))
        rows.append((code, i, j))
        coeffs.append(rng.uniform(0.5, 2.0, size=2) * rng.choice([-1.0, 1.0], size=2))
    # The last op uses the previous result and a value an earlier op used already: some
    # value always feeds two records, so accumulation is always tested.
    rows.append((LINEAR, n_leaves + n_ops - 1, rows[0][1]))
    coeffs.append(rng.uniform(0.5, 2.0, size=2))
    return (rng.standard_normal((n_leaves, width)), np.array(rows, dtype=np.int64),
            np.array(coeffs, dtype=np.float64), rng.standard_normal(width))


def _backward_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    if hidden:
        return [_program_case(rng, int(rng.integers(2, 4)), int(rng.integers(2, 7)),
                              int(rng.integers(1, 5))) for _ in range(4)]
    # Visible: x used twice by one op (x, x); a chain; a leaf nothing uses (gradient 0).
    twice = (rng.standard_normal((2, 3)),
             np.array([(LINEAR, 0, 0), (SIN, 2, 2), (LINEAR, 3, 1), (TANH, 4, 4),
                       (LINEAR, 5, 2)], dtype=np.int64),
             np.array([(2.0, 1.0), (1.0, 1.0), (1.0, -3.0), (1.0, 1.0), (1.0, 0.5)]),
             rng.standard_normal(3))
    unused = (rng.standard_normal((3, 2)),
              np.array([(TANH, 0, 0), (LINEAR, 3, 1), (SIN, 4, 4), (LINEAR, 5, 3)],
                       dtype=np.int64),
              np.array([(1.0, 1.0), (1.5, 2.0), (1.0, 1.0), (1.0, -1.0)]),
              rng.standard_normal(2))
    # The docstring's example, tape.add(x, x) as the output: a weight of 1 hands dout on by
    # reference (harness.ex08._linear_vjp), so a backward that stores it and then adds into it
    # (grads[x] = g; grads[x] += g) changes the caller's dout from [1.] to [2.].
    add_twice = (np.array([[3.0]]), np.array([(LINEAR, 0, 0)], dtype=np.int64),
                 np.array([(1.0, 1.0)]), np.array([1.0]))
    return [twice, unused, _program_case(rng, 2, 4, 4), add_twice]


def _backward_expected(leaves: Array, program: Array, coeffs: Array, dout: Array) -> Array:
    import torch

    values = list(_torch(*leaves))
    for (code, i, j), (c1, c2) in zip(program.tolist(), coeffs.tolist()):
        a, b = values[i], values[j]
        values.append(c1 * a + c2 * b if code == LINEAR else
                      torch.sin(a) if code == SIN else torch.tanh(a))
    values[-1].backward(torch.tensor(dout, dtype=torch.float64))
    return np.stack([_numpy(v.grad) if v.grad is not None else np.zeros(v.shape)
                     for v in values[:len(leaves)]])


def _replayed(a: Case, accumulate: bool = True, reverse: bool = True) -> Array:
    """The tape replayed with a mistake: gradients assigned, not added; or forwards."""
    leaves, program, coeffs, dout = a
    tape = record_program(leaves, program, coeffs)
    grads = [np.zeros_like(v) for v in tape.values]
    grads[-1] = np.asarray(dout, dtype=np.float64)
    for out, inputs, vjp in (tape.records[::-1] if reverse else tape.records):
        for i, g in zip(inputs, vjp(grads[out])):
            grads[i] = grads[i] + g if accumulate else g
    return np.stack(grads[:len(leaves)])


# --------------------------------------------------------------------------- softmax CE


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


CE_LABEL = ("dlogits is softmax(logits) minus the one-hot labels, divided by N: you left out "
            "the label term")

# --------------------------------------------------------------------------- BatchNorm


def _bn_forward_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    def case(n: int, d: int, train: bool, momentum: float) -> Case:
        return (3.0 * rng.standard_normal((n, d)) + rng.standard_normal(d),
                rng.uniform(0.5, 2.0, d), rng.standard_normal(d), rng.standard_normal(d),
                rng.uniform(0.5, 2.0, d), train, momentum, 1e-5)

    if not hidden:
        return [case(4, 3, True, 0.1), case(5, 2, True, 0.3), case(3, 4, False, 0.1)]
    return [case(int(rng.integers(2, 7)), int(rng.integers(1, 5)), train,
                 float(rng.uniform(0.05, 0.5))) for train in (True, True, False, True)]


def _bn_forward_expected(x: Array, gamma: Array, beta: Array, running_mean: Array,
                         running_var: Array, train: bool, momentum: float, eps: float
                         ) -> tuple[Array, Array, Array]:
    import torch

    rm, rv = torch.tensor(running_mean.copy()), torch.tensor(running_var.copy())
    out = torch.nn.functional.batch_norm(
        torch.tensor(x), rm, rv, torch.tensor(gamma), torch.tensor(beta),
        training=bool(train), momentum=float(momentum), eps=float(eps))
    return out.numpy(), rm.numpy(), rv.numpy()


def _bn(x: Array, gamma: Array, beta: Array, mean: Array, var: Array, eps: float) -> Array:
    return gamma * (x - mean) / np.sqrt(var + eps) + beta


def _bn_train_unbiased(e: Any, a: Case) -> Any:
    x, gamma, beta, _, _, train, _, eps = a
    if not train:
        return None
    return unless_right(e[0], _bn(x, gamma, beta, x.mean(0), x.var(0, ddof=1), eps))


def _bn_running_var_biased(e: Any, a: Case) -> Any:
    x, _, _, _, rv, train, m, _ = a
    return unless_right(e[2], (1 - m) * rv + m * x.var(0)) if train else None


def _bn_momentum_swapped(e: Any, a: Case) -> Any:
    x, _, _, rm, _, train, m, _ = a
    return unless_right(e[1], m * rm + (1 - m) * x.mean(0)) if train else None


def _bn_test_batch_stats(e: Any, a: Case) -> Any:
    x, gamma, beta, _, _, train, _, eps = a
    return None if train else unless_right(e[0], _bn(x, gamma, beta, x.mean(0), x.var(0), eps))


def _bn_test_updates(e: Any, a: Case) -> Any:
    x, _, _, rm, _, train, m, _ = a
    return None if train else unless_right(e[1], (1 - m) * rm + m * x.mean(0))


def _bn_backward_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    sizes = [(4, 3), (6, 2), (3, 5)] if not hidden else [
        (int(rng.integers(2, 8)), int(rng.integers(1, 5))) for _ in range(4)]
    return [(rng.standard_normal((n, d)), 2.0 * rng.standard_normal((n, d)) + 1.0,
             rng.uniform(0.5, 2.0, d), 1e-5) for n, d in sizes]


def _bn_backward_expected(dout: Array, x: Array, gamma: Array, eps: float
                          ) -> tuple[Array, Array, Array]:
    import torch

    xt, gt, bt = _torch(x, gamma, np.zeros_like(gamma))
    out = torch.nn.functional.batch_norm(xt, None, None, gt, bt, training=True, eps=float(eps))
    out.backward(torch.tensor(dout, dtype=torch.float64))
    return _numpy(xt.grad), _numpy(gt.grad), _numpy(bt.grad)


def _dxhat_xhat_std(a: Case) -> tuple[Array, Array, Array]:
    dout, x, gamma, eps = a
    std = np.sqrt(x.var(0) + eps)
    return dout * gamma, (x - x.mean(0)) / std, std


def _bn_no_mean_terms(e: Any, a: Case) -> Any:
    dxhat, _, std = _dxhat_xhat_std(a)
    return unless_right(e[0], dxhat / std)


def _bn_no_mean_of_dxhat(e: Any, a: Case) -> Any:
    dxhat, xhat, std = _dxhat_xhat_std(a)
    return unless_right(e[0], (dxhat - xhat * (dxhat * xhat).mean(0)) / std)


def _bn_no_variance_term(e: Any, a: Case) -> Any:
    dxhat, _, std = _dxhat_xhat_std(a)
    return unless_right(e[0], (dxhat - dxhat.mean(0)) / std)


def _bn_dbeta_averaged(e: Any, a: Case) -> Any:
    return unless_right(e[2], a[0].mean(0))


BN_MEAN_TERMS = ("the batch mean and variance depend on every row of x, so dx has three paths: "
                 "through x - mean directly, through the mean, and through the variance; ")

# --------------------------------------------------------------------------- dropout


def _keep(shape: tuple[int, ...], p: float, seed: int) -> Array:
    """The contract's mask: the seed's uniform draws, one per element, kept where u >= p."""
    return np.random.default_rng(int(seed)).random(shape) >= p


def _dropout_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    settings = [((4, 5), 0.5, True), ((3, 6), 0.2, True), ((2, 8), 0.7, True),
                ((3, 4), 0.5, False)]
    if hidden:
        settings = [((int(rng.integers(2, 7)), int(rng.integers(2, 7))),
                     float(rng.uniform(0.1, 0.8)), train) for train in (True, True, False, True)]
    return [(rng.standard_normal(shape), p, train, int(rng.integers(0, 2**31)))
            for shape, p, train in settings]


def _dropout_expected(x: Array, p: float, train: bool, seed: int) -> Array:
    return x * _keep(x.shape, p, seed) / (1 - p) if train else x.copy()


def _dropout_unscaled(e: Any, a: Case) -> Any:
    x, p, train, seed = a
    return unless_right(e, x * _keep(x.shape, p, seed)) if train else None


def _dropout_times_keep(e: Any, a: Case) -> Any:
    x, p, train, seed = a
    return unless_right(e, x * _keep(x.shape, p, seed) * (1 - p)) if train else None


def _dropout_mask_inverted(e: Any, a: Case) -> Any:
    x, p, train, seed = a
    return unless_right(e, x * ~_keep(x.shape, p, seed) / (1 - p)) if train else None


def _dropout_at_test(e: Any, a: Case) -> Any:
    x, p, train, seed = a
    return None if train else unless_right(e, x * _keep(x.shape, p, seed) / (1 - p))


def _dropout_mask_at_test(e: Any, a: Case) -> Any:
    x, p, train, seed = a
    return None if train else unless_right(e, x * _keep(x.shape, p, seed))


def _dropout_test_times_keep(e: Any, a: Case) -> Any:
    """Classic (not inverted) dropout's test-time rule: scale by the keep probability."""
    x, p, train, _ = a
    return None if train else unless_right(e, x * (1 - p))


def _dropout_test_divided(e: Any, a: Case) -> Any:
    x, p, train, _ = a
    return None if train else unless_right(e, x / (1 - p))


def _dropout_divided_twice(e: Any, a: Case) -> Any:
    x, p, train, seed = a
    return unless_right(e, x * _keep(x.shape, p, seed) / (1 - p) ** 2) if train else None


DROPOUT_SCALE = ("at train time divide the kept values by 1 - p (inverted dropout): then every "
                 "element's expected value is unchanged and test time needs no scaling")
DROPOUT_TEST = ("with train=False dropout does nothing (it returns its input as it is): no mask "
                "and no scaling at test time")
DROPOUT_INVERTED = ("you kept the elements whose draw u is below p: p is the probability to "
                    "DROP an element (keep it where u >= p)")
# Scaling at test time as well (classic dropout's rule, or the train-time one again).
DROPOUT_TEST_SCALED = ("at test time the output must equal the input (inverted dropout scales "
                       "during training only): with train=False you {} 1 - p")
DROPOUT_TEST_SCALED_BACK = ("at test time dx must equal dout (inverted dropout scales during "
                            "training only): with train=False you {} dout by 1 - p")
DROPOUT_TWICE = ("you divided the kept values by 1 - p twice: inverted dropout divides once, at "
                 "train time, and at test time the output must equal the input")
DROPOUT_BACK = ("the gradient flows back only through the elements the forward pass kept, with "
                "the same scale: dx is what the forward pass does to dout")


# --------------------------------------------------------------------------- going further

# The answers only: the speed itself is measured by the grader, from outside, in separate
# sandboxed runs (edu_dl.grading.stages.speed, a gradebook row of its own); the written
# justification is graded by hand.
FASTER = TASKS["ex08.faster_sgd_step"]


def _sgd_step_cases(rng: np.random.Generator, hidden: bool) -> list[tuple[Any, ...]]:
    sizes = [3, 8] if not hidden else [int(s) for s in rng.integers(2, 40, size=3)]
    return [FASTER.inputs(rng, size) for size in sizes]


PARTS = [
    Part(
        id="ex08.mul_backward", points=1, cases=_mul_cases, expected=_mul_expected,
        compare=NUMERIC, arg_names=("dout", "x", "y"), output_names=("dx", "dy"),
        source_check=BY_HAND,
        hints=(
            Mistake(lambda e, a: unless_right(e[0], a[0] * a[1]),
                    "dx = dout * y: each input's gradient uses the OTHER input (you used x)",
                    output=0, rtol=1e-5, atol=1e-7),
            Mistake(lambda e, a: unless_right(e[0], a[2]),
                    "multiply by dout: the chain rule scales the local gradient y by the "
                    "upstream dout", output=0, rtol=1e-5, atol=1e-7),
        ),
    ),
    Part(
        id="ex08.relu_backward", points=1, cases=_relu_cases, expected=_relu_expected,
        arg_names=("dout", "x"), source_check=BY_HAND,
        hints=(
            Mistake(lambda e, a: unless_right(e, a[0] * (a[1] >= 0)),
                    "at x == 0 you let the gradient through: take relu'(0) = 0 as PyTorch does "
                    "(mask with x > 0, not x >= 0)", rtol=1e-5, atol=1e-7),
            Mistake(lambda e, a: unless_right(e, a[0]),
                    "you passed dout through unchanged: multiply it by the mask (x > 0)",
                    rtol=1e-5, atol=1e-7),
            Mistake(lambda e, a: unless_right(e, (a[1] > 0).astype(np.float64)),
                    "that is the local gradient only: multiply the mask by dout",
                    rtol=1e-5, atol=1e-7),
        ),
    ),
    Part(
        id="ex08.unbroadcast", points=2, cases=_unbroadcast_cases,
        expected=_unbroadcast_expected, compare=EXACT64, call=call_unbroadcast,
        arg_names=("grad", "shape"), source_check=BY_HAND,
        hints=(
            EqualsArgument("you returned grad unchanged: an input that broadcasting stretched "
                           "was used once per copy, so its gradient is the sum over the copies",
                           argument=0),
            Mistake(_leading_only, "you summed the leading axes only: " + UNBROADCAST_SHAPE),
            Mistake(_averaged, "averaged where it should add up: each copy of an element "
                               "contributes its own gradient, so sum over the copies (your "
                               "result is exactly that many times too small)"),
            OtherShape(UNBROADCAST_SHAPE),
        ),
    ),
    Part(
        id="ex08.tape_ops", points=4, partial=True, cases=_tape_op_cases,
        expected=_tape_op_expected, compare=EXACT64, call=call_tape_op,
        arg_names=("op", "dout", "x", "y"), output_names=("value", "dx", "dy"),
        source_check=BY_HAND,
        hints=(
            Mistake(_on("exp", lambda a: a[1] * a[2]),
                    "exp's vjp used x where the derivative of exp is needed: d/dx exp(x) is "
                    "exp(x), already the op's value", output=1, **TOL),
            Mistake(_on("mean", lambda a: np.full(a[2].shape, a[1])),
                    "exactly x.size times too large: the mean divides by the number of "
                    "elements, so its vjp does too (you wrote the vjp of sum)", output=1, **TOL),
            Mistake(_on("log", lambda a: a[1] * np.log(a[2])),
                    "the derivative of log x is 1 / x, not log x", output=1, **TOL),
            Mistake(_on("relu", lambda a: a[1] * (a[2] >= 0)),
                    "at x == 0 you let the gradient through: take relu'(0) = 0 as PyTorch does",
                    output=1, **TOL),
            Mistake(_on("relu", lambda a: a[1]),
                    "relu's vjp passed dout through everywhere: it stops where x <= 0",
                    output=1, **TOL),
            Scalar("every gradient has the shape of its input, even when dout is a single "
                   "number", output=1),
            Transposed("each gradient has its input's shape: dx is (N, D) like x, dw is "
                       "(D, M) like w; let the shapes tell you which factor to transpose",
                       output=1, when=_is("matmul")),
            Transposed("each gradient has its input's shape: dx is (N, D) like x, dw is "
                       "(D, M) like w; let the shapes tell you which factor to transpose",
                       output=2, when=_is("matmul")),
            OtherShape(TAPE_SHAPES, output=1),
            OtherShape(TAPE_SHAPES, output=2),
            Scaled("the opposite sign: the vjp gives dL/dinput, no minus (that belongs to the "
                   "optimizer's step)", output=1, factor=-1.0),
        ),
    ),
    Part(
        id="ex08.tape_backward", points=3, cases=_backward_cases, expected=_backward_expected,
        compare=EXACT64, call=call_backward,
        arg_names=("leaves", "program", "coeffs", "dout"), source_check=BY_HAND,
        hints=(
            Mistake(lambda e, a: unless_right(e, _replayed(a, accumulate=False)),
                    "a value used by two ops got the gradient of only one of them: accumulate "
                    "(+=) every contribution into its gradient, never assign", **TOL),
            Mistake(lambda e, a: unless_right(e, _replayed(a, reverse=False)),
                    "replay the tape from the last record to the first: a value's gradient is "
                    "complete only once every op that used it has sent its contribution",
                    **TOL),
            Scaled("the opposite sign: start from dout itself, and add the vjps' results",
                   factor=-1.0),
        ),
    ),
    Part(
        id="ex08.softmax_cross_entropy", points=2, cases=_softmax_ce_cases,
        expected=_softmax_ce_expected, compare=tolerance(rtol=1e-5, atol=1e-6),
        arg_names=("logits", "y"), output_names=("loss", "dlogits"),
        call=call_leaving_inputs, source_check=BY_HAND,
        hints=(
            NonFinite("inf or nan: subtract each row's maximum from the logits before exp (it "
                      "changes nothing mathematically and keeps exp from overflowing)"),
            Mistake(lambda e, a: unless_right(e[1], len(a[1]) * e[1]),
                    "exactly N times too large: the loss is a MEAN over the batch, so "
                    "divide the gradient by N", output=1, rtol=1e-5, atol=1e-7),
            Mistake(lambda e, a: unless_right(e[1], _softmax(a[0]) / len(a[1])), CE_LABEL,
                    output=1, rtol=1e-5, atol=1e-7),
            Mistake(lambda e, a: unless_right(e[1], _softmax(a[0])), CE_LABEL, output=1,
                    rtol=1e-5, atol=1e-7),
        ),
    ),
    Part(
        id="ex08.batchnorm_forward", points=2, cases=_bn_forward_cases,
        expected=_bn_forward_expected, compare=EXACT64, call=call_leaving_inputs,
        arg_names=("x", "gamma", "beta", "running_mean", "running_var", "train", "momentum",
                   "eps"),
        output_names=("out", "running_mean", "running_var"), source_check=NO_LIBRARY_LAYER,
        hints=(
            Mistake(_bn_train_unbiased,
                    "normalise with the batch's biased variance (divide by N); the unbiased "
                    "one (N - 1) only goes into running_var", output=0, **TOL),
            Mistake(_bn_test_batch_stats,
                    "at test time (train=False) normalise with running_mean and running_var, "
                    "not with the batch's own statistics", output=0, **TOL),
            Mistake(_bn_test_updates,
                    "train=False leaves the running averages as they are", output=1, **TOL),
            Mistake(_bn_momentum_swapped,
                    "momentum is the weight of the NEW batch statistic (PyTorch's convention): "
                    "the running average keeps 1 - momentum of its old value", output=1, **TOL),
            Mistake(_bn_running_var_biased,
                    "running_var averages the UNBIASED batch variance (divide by N - 1), as "
                    "PyTorch does; only the normalisation uses the biased one", output=2, **TOL),
        ),
    ),
    Part(
        id="ex08.batchnorm_backward", points=3, cases=_bn_backward_cases,
        expected=_bn_backward_expected, compare=EXACT64, call=call_leaving_inputs,
        arg_names=("dout", "x", "gamma", "eps"), output_names=("dx", "dgamma", "dbeta"),
        source_check=BY_HAND,
        hints=(
            Mistake(_bn_no_mean_terms, BN_MEAN_TERMS + "you kept only the first", output=0,
                    **TOL),
            Mistake(_bn_no_mean_of_dxhat, BN_MEAN_TERMS + "the path through the mean is "
                    "missing", output=0, **TOL),
            Mistake(_bn_no_variance_term, BN_MEAN_TERMS + "the path through the variance is "
                    "missing", output=0, **TOL),
            Mistake(_bn_dbeta_averaged,
                    "dbeta is averaged over the batch where it should add up: every row uses "
                    "the same beta, so each row's gradient adds to it", output=2, **TOL),
            Scaled("dx has the opposite sign", output=0, factor=-1.0),
        ),
    ),
    Part(
        id="ex08.dropout_forward", points=1, cases=_dropout_cases, expected=_dropout_expected,
        compare=EXACT64, call=call_leaving_inputs, arg_names=("x", "p", "train", "seed"),
        source_check=NO_LIBRARY_LAYER,
        hints=(
            Mistake(_dropout_unscaled, DROPOUT_SCALE, **TOL),
            Mistake(_dropout_times_keep, "you multiplied by 1 - p: " + DROPOUT_SCALE, **TOL),
            Mistake(_dropout_mask_inverted, DROPOUT_INVERTED, **TOL),
            Mistake(_dropout_at_test, DROPOUT_TEST, **TOL),
            Mistake(_dropout_mask_at_test, DROPOUT_TEST, **TOL),
            Mistake(_dropout_test_times_keep, DROPOUT_TEST_SCALED.format("multiplied by"), **TOL),
            Mistake(_dropout_test_divided, DROPOUT_TEST_SCALED.format("divided by"), **TOL),
            Mistake(_dropout_divided_twice, DROPOUT_TWICE, **TOL),
        ),
    ),
    Part(
        id="ex08.dropout_backward", points=1, cases=_dropout_cases, expected=_dropout_expected,
        compare=EXACT64, call=call_leaving_inputs, arg_names=("dout", "p", "train", "seed"),
        source_check=NO_LIBRARY_LAYER,
        hints=(
            EqualsArgument(DROPOUT_BACK + " (you passed dout through unchanged)", argument=0),
            Mistake(_dropout_unscaled, DROPOUT_BACK + " (the 1 / (1 - p) is missing)", **TOL),
            Mistake(_dropout_at_test, DROPOUT_TEST, **TOL),
            Mistake(_dropout_mask_at_test, DROPOUT_TEST, **TOL),
            Mistake(_dropout_test_times_keep, DROPOUT_TEST_SCALED_BACK.format("multiplied"),
                    **TOL),
            Mistake(_dropout_test_divided, DROPOUT_TEST_SCALED_BACK.format("divided"), **TOL),
            Mistake(_dropout_divided_twice, DROPOUT_BACK + " (you divided by 1 - p twice)",
                    **TOL),
        ),
    ),
    Part(
        id=FASTER.part_id, points=1, cases=_sgd_step_cases, expected=FASTER.reference,
        compare=tolerance(rtol=FASTER.rtol, atol=FASTER.atol), arg_names=("X", "y", "W"),
        source_check=all_checks(names_check(forbidden=[((FASTER.reference.__name__,),
                                                         CALLS_THE_REFERENCE)]), speed_rules),
    ),
]
