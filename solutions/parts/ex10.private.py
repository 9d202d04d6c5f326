"""Exercise 10, PyTorch: gradients by hand on tensors (the lecture's net with a bias on each layer,
the step its level 1 leaves open), a custom autograd Function, a residual Module that starts as
the identity (a skip connection and a zero-initialized last layer, neither in the lecture), and
Adam on a batch taken in micro-batches of unequal size with a mean loss (gradient accumulation,
each micro-batch weighted by its share of the rows: the step the lecture's loop leaves open).

The student's functions receive torch float64 tensors (``call``, public in ``edu_dl.harness.ex10``,
converts the grader's NumPy arrays).
The oracles are independent of the student's task: edu_dl's eager engine, ``edu_dl.nn`` and
``edu_dl.optim`` for the training losses, torch.autograd on built-in ops for the custom Function's
gradients, and a NumPy formula for the Module's output (as built: its input; with given weights:
x + relu(x W1^T + b1) W2^T + b2). Hints replay typical mistakes in NumPy.

Judged outside the sandbox: every value, shape and dtype kind against the oracle, on the raw
values the student's code returned (the custom Function's gradients are recorded as its backward
returns them, before autograd can sum a broadcast gradient into shape); from the submitted source:
the manual part never asks autograd (no backward, grad, requires_grad), MyLinear subclasses
``torch.autograd.Function`` with its own forward and backward, and that backward does not ask
autograd for the gradients (the oracle is autograd itself), ResidualBlock subclasses
``nn.Module`` and builds ``nn.Linear`` layers, the accumulating loop calls backward and Adam. The
accumulation's oracle is the full batch's Adam on the mean loss (each micro-batch's mean weighted
by its rows / N, the micro-batches' gradients add up to the batch's); the most rows one module's
forward saw is observed in the sandbox by a global forward hook, so, like exercise 9's tracing
count, it is check()'s feedback only (``feedback_outputs``): a whole batch at once gets the right
losses and a hint, not a grade. That autograd is switched off, that the backward really ran and the
layers found in the module are check()'s feedback only.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from edu_dl.grading.authoring.hints import Mistake
from edu_dl.grading.authoring.parts import sibling
from edu_dl.grading.authoring.source import all_checks, names_check
from edu_dl.grading.authoring.spec import Part, tolerance
from edu_dl.harness.ex09 import Stuck
from edu_dl.harness.ex10 import (
    ClassCheck,
    DiffersFromArgument,
    ShapeOfArgument,
    call_accumulated,
    call_function,
    call_manual,
    call_module,
)
from edu_dl.harness.mytorch import call_cross_entropy, call_linear, call_sgd, call_train_step

ex09 = sibling(__file__, "ex09")  # exercise 9's problem sizes and learning rates, reused

Array = np.ndarray
Case = tuple[Any, ...]
# float64 engines agree to ~1e-14 here; the lecture compares them to 1e-9.
COMPARE = tolerance(rtol=1e-9, atol=1e-12)


# --------------------------------------------------------------------------- 1. gradients by hand


def _manual_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    """(X, y, w1, b1, w2, b2, lr, num_steps): the lecture's net with a bias on each layer, the
    SUMMED squared error; lr as exercise 9's, divided by N."""
    two_layer_case, two_layer_sizes = ex09.two_layer_case, ex09.two_layer_sizes
    cases = []
    for size in two_layer_sizes(rng, hidden):
        x, y, w1, w2, lr, steps = two_layer_case(rng, *size)
        b1, b2 = 0.5 * rng.standard_normal(w1.shape[1]), 0.5 * rng.standard_normal(w2.shape[1])
        cases.append((x, y, w1, b1, w2, b2, float(f"{lr / len(x):.2g}"), steps))
    return cases


def _manual_expected(x: Array, y: Array, w1: Array, b1: Array, w2: Array, b2: Array, lr: float,
                     num_steps: int) -> Array:
    """edu_dl's eager engine: loss = sum((relu(x @ w1 + b1) @ w2 + b2 - y) ** 2), p -= lr * grad."""
    import edu_dl as ed

    xt, yt = ed.tensor(x), ed.tensor(y)
    params = [w1, b1, w2, b2]
    losses = []
    for _ in range(int(num_steps)):
        w1t, b1t, w2t, b2t = (ed.tensor(p, requires_grad=True) for p in params)
        loss = ((ed.ops.relu(xt @ w1t + b1t) @ w2t + b2t - yt) ** 2).sum()
        loss.backward()
        losses.append(loss.item())
        grads = [t.grad for t in (w1t, b1t, w2t, b2t)]
        assert all(g is not None for g in grads)
        params = [p - lr * g.numpy() for p, g in zip(params, grads) if g is not None]
    return np.array(losses)


def numpy_manual_losses(x: Array, y: Array, w1: Array, b1: Array, w2: Array, b2: Array,
                        lr: float, num_steps: int, *, biases: bool = True,
                        update_biases: bool = True, bias_reduce: str = "sum",
                        mask_db1: bool = True) -> Array:
    """The biased net's gradient descent in NumPy, with a mistake switched on: no biases at all
    (the lecture's net), biases never updated, bias gradients averaged over the batch, or b1's
    gradient taken before the ReLU's mask."""
    w1, w2 = np.array(w1, dtype=np.float64), np.array(w2, dtype=np.float64)
    b1, b2 = (np.array(b, dtype=np.float64) * biases for b in (b1, b2))
    reduce = np.sum if bias_reduce == "sum" else np.mean
    losses = []
    for _ in range(int(num_steps)):
        pre = x @ w1 + b1
        h = np.maximum(pre, 0)
        g_out = 2 * (h @ w2 + b2 - y)
        losses.append(float(np.sum((g_out / 2) ** 2)))
        g_h = g_out @ w2.T
        g_pre = g_h * (pre > 0)
        w1, w2 = w1 - lr * (x.T @ g_pre), w2 - lr * (h.T @ g_out)
        if biases and update_biases:
            b1 = b1 - lr * reduce(g_pre if mask_db1 else g_h, axis=0)
            b2 = b2 - lr * reduce(g_out, axis=0)
    return np.array(losses)


# float64 loops agree to ~1e-14: a replay matches a mistake's result to the comparison's tolerance
TOL = 1e-9, 1e-12


def _manual_mistake(message: str, **mistake: Any) -> Mistake:
    return Mistake(lambda e, a: numpy_manual_losses(*a, **mistake), message, rtol=TOL[0],
                   atol=TOL[1])


MANUAL_HINTS = (
    _manual_mistake("those are the lecture's net's losses, without biases: the hidden layer is "
                    "relu(X @ w1 + b1), the output h_relu @ w2 + b2", biases=False),
    _manual_mistake("the biases never move: update b1 and b2 by their gradients too, each step",
                    update_biases=False),
    _manual_mistake("a bias gradient SUMS over the batch's rows (every row added the bias), "
                    "it is not their mean", bias_reduce="mean"),
    _manual_mistake("b1's gradient goes through the ReLU: mask it where the hidden layer's input "
                    "is <= 0, like w1's", mask_db1=False),
)


# --------------------------------------------------------------------------- 2. autograd.Function


def _linear_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    """(x (N, D), w (D, M), b (M,), dout (N, M)); one square case, where a missing transpose
    still has the right shape."""
    dims = [(2, 3, 4), (5, 2, 3), (3, 3, 3)] if not hidden else [(1, 1, 1)] + [
        tuple(int(d) for d in rng.integers(1, 7, size=3)) for _ in range(3)]
    return [(rng.standard_normal((n, d)), rng.standard_normal((d, m)), rng.standard_normal(m),
             rng.standard_normal((n, m))) for n, d, m in dims]


def _linear_expected(x: Array, w: Array, b: Array, dout: Array) -> tuple[Array, ...]:
    """torch.autograd through the built-in ops: out = x @ w + b, then out.backward(dout)."""
    import torch

    xt, wt, bt = (torch.tensor(a, dtype=torch.float64, requires_grad=True) for a in (x, w, b))
    out = xt @ wt + bt
    out.backward(torch.tensor(dout, dtype=torch.float64))
    assert xt.grad is not None and wt.grad is not None and bt.grad is not None
    return out.detach().numpy(), xt.grad.numpy(), wt.grad.numpy(), bt.grad.numpy()


AUTOGRAD_NAMES = ("backward", "grad", "autograd", "requires_grad", "requires_grad_",
                  "enable_grad", "set_grad_enabled")
MANUAL_SOURCE = names_check(forbidden=[(
    AUTOGRAD_NAMES, "the function asks autograd for the gradients (backward, .grad, "
                    "requires_grad, torch.autograd): compute the four gradients yourself with "
                    "the chain rule, as in the lecture's level 1")])
# The oracle is autograd through x @ w + b: a backward that asks autograd (torch.autograd.grad,
# or .backward() and .grad on a re-run forward) returns it without writing any rule. The class
# body itself defines `backward`, so that name cannot be forbidden here; .grad covers its use.
FUNCTION_SOURCE = all_checks(
    ClassCheck("Function", ("forward", "backward"), "torch.autograd.Function"),
    names_check(forbidden=[(
        ("grad", "autograd", "requires_grad", "requires_grad_", "enable_grad", "set_grad_enabled",
         "vjp"),
        "this part asks you to write the gradients yourself: MyLinear's backward asks autograd "
        "for them (torch.autograd.grad, .grad, requires_grad, enable_grad); return dx, dw and "
        "db computed from grad_output and the saved tensors (lecture 8's VJP rules)")]))
MODULE_SOURCE = all_checks(
    ClassCheck("Module", ("forward",), "torch.nn.Module"),
    names_check(required=[(("Linear",), "ResidualBlock builds no torch.nn.Linear layers: "
                                        "create two in __init__, D -> H and H -> D")]))


# --------------------------------------------------------------------------- 3. nn.Module


def _module_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    """(x (N, D), W1 (H, D), b1 (H,), W2 (D, H), b2 (D,)): PyTorch's layout; one case with
    H == D, where the two layers have the same shape."""
    dims = [(3, 4, 5), (1, 3, 2), (6, 5, 5)] if not hidden else [
        tuple(int(d) for d in rng.integers(1, 9, size=3)) for _ in range(4)]
    cases = []
    for n, d, h in dims:
        b_in, b_h = 1 / np.sqrt(d), 1 / np.sqrt(h)
        cases.append((rng.standard_normal((n, d)), rng.uniform(-b_in, b_in, (h, d)),
                      rng.uniform(-b_in, b_in, h), rng.uniform(-b_h, b_h, (d, h)),
                      rng.uniform(-b_h, b_h, d)))
    return cases


def _module_expected(x: Array, w1: Array, b1: Array, w2: Array, b2: Array
                     ) -> tuple[Array, Array]:
    """As built, the block is the identity; with the weights: x + relu(x W1^T + b1) W2^T + b2
    (nn.Linear computes x @ W.T + b)."""
    return x.copy(), x + np.maximum(x @ w1.T + b1, 0) @ w2.T + b2


# --------------------------------------------------------------------------- 4. Adam, accumulated


def _adam_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    """(X, y, W1, b1, W2, b2, lr, num_steps, micro_batch), weights in PyTorch's layout and
    initialization; micro-batches that do not divide the batch (a shorter last one: weighting
    by the number of micro-batches is wrong there), one row, and the whole batch."""
    micro = int(rng.integers(2, 5))
    uneven = micro * int(rng.integers(1, 4)) + int(rng.integers(1, micro))
    sizes = [(8, 6, 5, 3, 6, 3), (4, 3, 7, 2, 6, 3)] if not hidden else [(1, 1, 1, 1, 2, 1)] + [
        (n, *(int(d) for d in rng.integers(1, 10, size=3)), int(rng.integers(2, 11)), m)
        for n, m in ((7, 1), (9, 9), (uneven, micro))]
    cases = []
    for n, d_in, h, d_out, steps, micro in sizes:
        x = rng.standard_normal((n, d_in))
        b_in, b_h = 1 / np.sqrt(d_in), 1 / np.sqrt(h)
        weights = [rng.uniform(-b_in, b_in, (h, d_in)), rng.uniform(-b_in, b_in, h),
                   rng.uniform(-b_h, b_h, (d_out, h)), rng.uniform(-b_h, b_h, d_out)]
        lr = 1e-2 if not hidden else float(f"{rng.uniform(1e-3, 5e-2):.2g}")
        cases.append((x, rng.standard_normal((n, d_out)), *weights, lr, steps, micro))
    return cases


def _adam_expected(x: Array, y: Array, w1: Array, b1: Array, w2: Array, b2: Array, lr: float,
                   num_steps: int, micro_batch: int) -> tuple[Array, Array]:
    """edu_dl.nn.Sequential + edu_dl.optim.Adam (PyTorch's formula) on the WHOLE batch's mean
    loss: each micro-batch's mean weighted by its rows / N, the micro-batches' accumulated
    gradients are the batch's. And the most rows a forward may see: one micro-batch."""
    import edu_dl as ed

    model = ed.nn.Sequential(
        ed.nn.Linear(w1.shape[1], w1.shape[0], dtype=np.float64, weight=w1.T, bias_value=b1),
        ed.nn.ReLU(),
        ed.nn.Linear(w2.shape[1], w2.shape[0], dtype=np.float64, weight=w2.T, bias_value=b2),
    )
    loss_fn = ed.nn.MSELoss(reduction="mean")
    optimizer = ed.optim.Adam(model.parameters(), lr=lr)
    xt, yt = ed.tensor(x), ed.tensor(y)
    losses = []
    for _ in range(int(num_steps)):
        loss = loss_fn(model(xt), yt)
        losses.append(loss.item())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return np.array(losses), np.array(min(int(micro_batch), len(x)))


def _loss_and_grads(params: list[Array], x: Array, y: Array, scale: float
                    ) -> tuple[float, list[Array]]:
    """The net's squared error on (x, y) times ``scale``, and its gradients (NumPy)."""
    w1_, b1_, w2_, b2_ = params
    pre = x @ w1_.T + b1_
    h = np.maximum(pre, 0)
    diff = h @ w2_.T + b2_ - y
    g_out = 2 * scale * diff
    g_pre = (g_out @ w2_) * (pre > 0)
    return scale * float(np.sum(diff ** 2)), [g_pre.T @ x, g_pre.sum(0), g_out.T @ h, g_out.sum(0)]


def numpy_adam_losses(x: Array, y: Array, w1: Array, b1: Array, w2: Array, b2: Array, lr: float,
                      num_steps: int, micro_batch: int | None = None, *, weighting: str = "rows",
                      zero_grad: bool = True, zero_each_micro: bool = False,
                      step_each_micro: bool = False, extra_sgd: bool = False,
                      sgd: bool = False) -> Array:
    """The accumulating Adam loop in NumPy on the mean loss (a step's loss: its micro-batches'
    weighted losses added up), each micro-batch's mean weighted by ``weighting``: 'rows' (right:
    rows / N), or a mistake: 'none' (the means added), 'count' (divided by the number of
    micro-batches), 'sum' (the summed squared error). Or another mistake: gradients never zeroed
    (they accumulate across steps), zeroed before every micro-batch (only the last one's
    reaches the step), one step per micro-batch, the source's extra ``param -= lr * grad``
    after the step, or plain SGD."""
    params = [np.array(p, dtype=np.float64) for p in (w1, b1, w2, b2)]
    zeros = [np.zeros_like(p) for p in params]
    grads, m, v = list(zeros), list(zeros), list(zeros)
    size = len(x) if micro_batch is None else max(1, int(micro_batch))
    t, losses = 0, []

    def update(grads: list[Array]) -> None:
        nonlocal t
        t += 1
        for i, g in enumerate(grads):
            if sgd:
                params[i] = params[i] - lr * g
                continue
            m[i] = 0.9 * m[i] + 0.1 * g
            v[i] = 0.999 * v[i] + 0.001 * g * g
            m_hat, v_hat = m[i] / (1 - 0.9 ** t), v[i] / (1 - 0.999 ** t)
            params[i] = params[i] - lr * m_hat / (np.sqrt(v_hat) + 1e-8)
            if extra_sgd:
                params[i] = params[i] - lr * g

    for _ in range(int(num_steps)):
        if zero_grad:
            grads = list(zeros)
        total = 0.0
        for start in range(0, len(x), size):
            if zero_each_micro or step_each_micro:
                grads = list(zeros)
            rows = len(x[start:start + size])
            scale = {"rows": 1 / (len(x) * y.shape[1]), "none": 1 / (rows * y.shape[1]),
                     "count": 1 / (-(-len(x) // size) * rows * y.shape[1]), "sum": 1.0}[weighting]
            loss, new = _loss_and_grads(params, x[start:start + size], y[start:start + size],
                                        scale)
            total += loss
            grads = [g + n for g, n in zip(grads, new)]
            if step_each_micro:
                update(grads)
        if not step_each_micro:
            update(grads)
        losses.append(total)
    return np.array(losses)


def _adam_replay(case: tuple[Any, ...], **mistake: Any) -> Array:
    """numpy_adam_losses on a case."""
    return numpy_adam_losses(*case, **mistake)


def _mistake(replay: Any, message: str, output: int | None = None) -> Mistake:
    return Mistake(replay, message, output=output, rtol=TOL[0], atol=TOL[1])


def _whole_batch_seen(e: Any, a: Case) -> Array | None:
    """The most rows one forward saw when the whole batch went through at once."""
    return np.array(len(a[0])) if int(a[8]) < len(a[0]) else None


ADAM_HINTS = (
    _mistake(lambda e, a: _adam_replay(a, weighting="sum"),
             "those are the summed squared error's losses: the loss is the MEAN over the whole "
             "batch's entries (torch.nn.MSELoss(), reduction='mean')", output=0),
    _mistake(lambda e, a: _adam_replay(a, weighting="none"),
             "you added the micro-batches' means: each one averages its own rows only; weight it "
             "by its share of the batch's rows, len(rows) / N, so that they add up to the whole "
             "batch's mean", output=0),
    _mistake(lambda e, a: _adam_replay(a, weighting="count"),
             "you divided by the number of micro-batches: the last one is shorter, so its rows "
             "weigh more than the others'; weight each micro-batch's mean by len(rows) / N",
             output=0),
    _mistake(lambda e, a: _adam_replay(a, zero_grad=False),
             "the gradients pile up from one step to the next: zero them once per step, before "
             "the first micro-batch's backward", output=0),
    _mistake(lambda e, a: _adam_replay(a, zero_each_micro=True),
             "only the last micro-batch's gradient reached the step: zero the gradients once per "
             "step, not before every micro-batch (backward adds into .grad; that is the point)",
             output=0),
    _mistake(lambda e, a: _adam_replay(a, step_each_micro=True),
             "you took one Adam step per micro-batch: let every micro-batch's backward add to "
             "the gradients, then call optimizer.step() once per step", output=0),
    _mistake(lambda e, a: _adam_replay(a, extra_sgd=True),
             "every weight moves twice per step: remove the source's manual `param.data -= lr * "
             "param.grad` after optimizer.step() (Adam already updated it)", output=0),
    _mistake(lambda e, a: _adam_replay(a, sgd=True),
             "those are plain gradient descent's losses: use torch.optim.Adam(model.parameters(), "
             "lr=lr)", output=0),
    _mistake(_whole_batch_seen,
             "the model saw the whole batch at once: run it on micro-batches of at most "
             "micro_batch rows (X[start:start + micro_batch]), that is what fits in memory",
             output=1),
    _mistake(lambda e, a: np.array(0),
             "no torch.nn.Module ran a forward pass: build the model with nn.Sequential and call "
             "it on the micro-batches", output=1),
    Stuck("every loss equals the first: the weights never change. Call optimizer.step() each "
          "step, with the optimizer built on model.parameters()", rtol=TOL[0], atol=TOL[1]),
)
ACCUMULATION_SOURCE = names_check(required=[
    (("backward",), "the loop calls no backward(): each micro-batch's loss.backward() adds its "
                    "gradient to the parameters' .grad"),
    (("Adam",), "the loop uses no torch.optim.Adam"),
])


def _square_w_dx(e: Any, a: Case) -> Array | None:
    """dx without the transpose, grad_output @ w: only computable where D == M."""
    return a[3] @ a[1] if a[1].shape[0] == a[1].shape[1] else None


def _dw_flipped(e: Any, a: Case) -> Array | None:
    """dw as x @ grad_output.T: only computable where D == M."""
    return a[0] @ a[3].T if a[0].shape[1] == a[3].shape[1] else None


LINEAR_HINTS = (
    ShapeOfArgument("db has b's shape (M,): sum grad_output over the batch, "
                    "grad_output.sum(dim=0) (autograd would quietly sum a gradient of shape "
                    "(N, M) for you; the grader does not)", output=3, argument=3),
    _mistake(lambda e, a: a[0] @ a[1], "forward forgot the bias: out = x @ w + b", output=0),
    _mistake(lambda e, a: a[3].mean(0),
             "db SUMS grad_output over the batch (every row added b): grad_output.sum(0), not "
             "the mean", output=3),
    _mistake(_square_w_dx, "dx = grad_output @ w.T: transpose w (the shapes hid it here, D == M)",
             output=1),
    _mistake(lambda e, a: a[3].T @ a[0], "dw = x.T @ grad_output, of w's shape (D, M)", output=2),
    _mistake(_dw_flipped, "dw = x.T @ grad_output, of w's shape (D, M)", output=2),
)

NO_SKIP = ("the block adds its input to what the two layers make: out = x + branch(x), the skip "
           "connection")
RELU_AFTER = ("no ReLU after the sum: out = x + linear2(relu(linear1(x))), so that a block whose "
              "branch gives 0 passes x through unchanged, negative entries included")
MODULE_HINTS = (
    _mistake(lambda e, a: np.zeros_like(a[0]), NO_SKIP, output=0),
    _mistake(lambda e, a: np.maximum(a[0], 0), RELU_AFTER, output=0),
    _mistake(lambda e, a: np.maximum(a[0] @ a[1].T + a[2], 0) @ a[3].T + a[4], NO_SKIP,
             output=1),
    _mistake(lambda e, a: np.maximum(e[1], 0), RELU_AFTER, output=1),
    _mistake(lambda e, a: a[0] + (a[0] @ a[1].T + a[2]) @ a[3].T + a[4],
             "apply the ReLU between the layers: linear2(relu(linear1(x)))", output=1),
    DiffersFromArgument("the block as built is not the identity: set linear2's weight and bias "
                        "to zero in __init__ (torch.nn.init.zeros_), so that the branch adds 0 "
                        "until training moves it", output=0, argument=0),
)

# --------------------------------------------------------------------------- 5. your framework
# The student's mytorch/nn.py on their own exercise-8 tape (edu_dl.harness.mytorch drives it);
# the oracles are torch in float64, which the student's package may not call.


def _torch64(*arrays: Any) -> list[Any]:
    import torch

    return [torch.tensor(a, dtype=torch.float64, requires_grad=True) for a in arrays]


def _my_linear_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    """(x (N, n_in), weight (n_in, n_out), bias (n_out,), dout (N, n_out)); one row, one
    output."""
    dims = [(4, 3, 2), (1, 5, 3), (3, 2, 1)] if not hidden else [
        tuple(int(d) for d in rng.integers(1, 8, size=3)) for _ in range(4)]
    return [(rng.standard_normal((n, i)), rng.uniform(-1, 1, (i, o)), rng.uniform(-1, 1, o),
             rng.standard_normal((n, o))) for n, i, o in dims]


def _my_linear_expected(x: Array, weight: Array, bias: Array, dout: Array
                        ) -> tuple[Array, ...]:
    import torch

    xs, w, b = _torch64(x, weight, bias)
    out = xs @ w + b
    grads = torch.autograd.grad(out, (xs, w, b), torch.tensor(dout))
    return (out.detach().numpy(), *(g.numpy() for g in grads))


def _ce_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    """(logits (N, C), y (N,) ints, dout a number); large logits once (a softmax that is not
    shifted overflows)."""
    dims = [(4, 3, 1.0), (2, 5, 2.5), (3, 2, 1.0)] if not hidden else [
        (int(rng.integers(1, 9)), int(rng.integers(2, 8)), float(f"{rng.uniform(0.5, 3):.2g}"))
        for _ in range(4)]
    cases = []
    for k, (n, c, dout) in enumerate(dims):
        scale = 300.0 if k == 1 else 1.0
        cases.append((scale * rng.standard_normal((n, c)), rng.integers(0, c, n), dout))
    return cases


def _ce_expected(logits: Array, y: Array, dout: float) -> tuple[Array, Array]:
    import torch

    (xs,) = _torch64(logits)
    loss = torch.nn.functional.cross_entropy(xs, torch.tensor(y))
    (grad,) = torch.autograd.grad(loss, xs, torch.tensor(float(dout), dtype=torch.float64))
    return loss.detach().numpy(), grad.numpy()


def _sgd_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    """(w (A, B), b (B,), grads_w (steps, A, B), grads_b (steps, B), lr, momentum): plain SGD
    once, momentum otherwise."""
    settings = [((3, 2), 3, 0.1, 0.9), ((2, 4), 2, 0.5, 0.0), ((1, 1), 4, 0.05, 0.5)] \
        if not hidden else [((int(rng.integers(1, 6)), int(rng.integers(1, 6))),
                             int(rng.integers(1, 6)), float(f"{rng.uniform(0.01, 1):.2g}"),
                             float(f"{rng.uniform(0, 0.99):.2g}")) for _ in range(4)]
    return [(rng.standard_normal(shape), rng.standard_normal(shape[1]),
             rng.standard_normal((steps, *shape)), rng.standard_normal((steps, shape[1])), lr,
             momentum) for shape, steps, lr, momentum in settings]


def _sgd_expected(w: Array, b: Array, grads_w: Array, grads_b: Array, lr: float,
                  momentum: float) -> Array:
    import torch

    params = [torch.tensor(w, dtype=torch.float64), torch.tensor(b, dtype=torch.float64)]
    optimizer = torch.optim.SGD(params, lr=lr, momentum=momentum)
    seen = []
    for gw, gb in zip(grads_w, grads_b):
        params[0].grad, params[1].grad = torch.tensor(gw), torch.tensor(gb)
        optimizer.step()
        seen.append(np.concatenate([params[0].numpy().ravel(), params[1].numpy().ravel()]))
    return np.array(seen)


def _train_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    """(x, y, W1 (D, H), b1, W2 (H, C), b2, lr, momentum, num_steps), weights in mytorch's
    layout (x @ W), initialized as torch.nn.Linear is."""
    sizes = [(8, 5, 6, 3, 3), (5, 2, 4, 4, 2)] if not hidden else [
        (int(rng.integers(1, 12)), *(int(d) for d in rng.integers(1, 8, size=2)),
         int(rng.integers(2, 6)), int(rng.integers(1, 5))) for _ in range(4)]
    cases = []
    for n, d, h, c, steps in sizes:
        b_in, b_h = 1 / np.sqrt(d), 1 / np.sqrt(h)
        weights = [rng.uniform(-b_in, b_in, (d, h)), rng.uniform(-b_in, b_in, h),
                   rng.uniform(-b_h, b_h, (h, c)), rng.uniform(-b_h, b_h, c)]
        lr = 0.1 if not hidden else float(f"{rng.uniform(0.01, 0.5):.2g}")
        momentum = 0.9 if not hidden else float(f"{rng.uniform(0, 0.95):.2g}")
        cases.append((rng.standard_normal((n, d)), rng.integers(0, c, n), *weights, lr,
                      momentum, steps))
    return cases


def _train_expected(x: Array, y: Array, w1: Array, b1: Array, w2: Array, b2: Array, lr: float,
                    momentum: float, num_steps: int) -> tuple[Array, ...]:
    import torch

    params = _torch64(w1, b1, w2, b2)
    optimizer = torch.optim.SGD(params, lr=lr, momentum=momentum)
    xs, labels = torch.tensor(x), torch.tensor(y)
    losses = []
    for _ in range(int(num_steps)):
        optimizer.zero_grad()
        hidden = torch.relu(xs @ params[0] + params[1])
        loss = torch.nn.functional.cross_entropy(hidden @ params[2] + params[3], labels)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return (np.array(losses), *(p.detach().numpy() for p in params))


OWN_ENGINE = names_check(forbidden=[(
    ("torch", "edu_dl", "autograd", "tensorflow", "jax"),
    "your framework runs on your own engine: NumPy and mytorch, no torch, edu_dl, TensorFlow "
    "or JAX")])
# Uses of an earlier exercise's piece name the object the later one calls: "part@name".
ENGINE = ("ex08.tape_ops@Tape", "ex08.tape_backward@backward")
MY_LINEAR_HINTS = (
    _mistake(lambda e, a: a[0] @ a[1], "the layer forgot its bias: x @ weight + bias",
             output=0),
    _mistake(lambda e, a: a[3].mean(0),
             "dbias sums dout over the batch (every row added the bias), it does not average",
             output=3),
)
CE_HINTS = (
    _mistake(lambda e, a: e[1] / a[2], "the vjp ignored dout: multiply softmax_cross_entropy's "
             "gradient by the upstream gradient", output=1),
)
SGD_HINTS = (
    _mistake(lambda e, a: _sgd_expected(a[0], a[1], a[2], a[3], a[4], 0.0),
             "momentum was left out: velocity = momentum * velocity + grad, then "
             "param -= lr * velocity", output=0),
)


# check()'s bound on each part: PyTorch's first torch.optim.Adam(...) in a process imports
# TorchDynamo (4.3 s on a quiet 2-core machine; 19 s of the old 20 s bound seen under load), and
# the first autograd.Function 2.7 s, inside the bound; 60 s keeps a loaded machine's honest
# answer far from it (issue 43), as ex14's bounds do.
TIMEOUT_S = 60.0

PARTS = [
    Part(
        id="ex10.manual_biases", points=2, cases=_manual_cases, expected=_manual_expected,
        compare=COMPARE, call=call_manual, source_check=MANUAL_SOURCE, timeout_s=TIMEOUT_S,
        arg_names=("X", "y", "w1", "b1", "w2", "b2", "lr", "num_steps"), hints=MANUAL_HINTS,
    ),
    Part(
        id="ex10.linear_function", points=2, cases=_linear_cases, expected=_linear_expected,
        compare=COMPARE, call=call_function, source_check=FUNCTION_SOURCE, timeout_s=TIMEOUT_S,
        arg_names=("x", "w", "b", "grad_output"), output_names=("out", "dx", "dw", "db"),
        hints=LINEAR_HINTS,
    ),
    Part(
        id="ex10.residual_module", points=2, cases=_module_cases, expected=_module_expected,
        compare=COMPARE, call=call_module, source_check=MODULE_SOURCE, timeout_s=TIMEOUT_S,
        arg_names=("x", "W1", "b1", "W2", "b2"), output_names=("as_built", "out"),
        hints=MODULE_HINTS,
    ),
    Part(
        id="ex10.adam_accumulation", points=3, cases=_adam_cases, expected=_adam_expected,
        compare=COMPARE, call=call_accumulated, source_check=ACCUMULATION_SOURCE,
        feedback_outputs=(1,), timeout_s=TIMEOUT_S,
        arg_names=("X", "y", "W1", "b1", "W2", "b2", "lr", "num_steps", "micro_batch"),
        output_names=("losses", "largest_forward_batch"), hints=ADAM_HINTS,
    ),
    Part(
        id="ex10.my_linear", points=2, cases=_my_linear_cases, expected=_my_linear_expected,
        compare=COMPARE, call=call_linear, source_check=OWN_ENGINE, timeout_s=TIMEOUT_S,
        arg_names=("x", "weight", "bias", "dout"),
        output_names=("value", "dx", "dweight", "dbias"), hints=MY_LINEAR_HINTS, uses=ENGINE,
    ),
    Part(
        id="ex10.my_cross_entropy", points=1, cases=_ce_cases, expected=_ce_expected,
        compare=COMPARE, call=call_cross_entropy, source_check=OWN_ENGINE, timeout_s=TIMEOUT_S,
        arg_names=("logits", "y", "dout"), output_names=("loss", "dlogits"), hints=CE_HINTS,
        uses=(*ENGINE, "ex08.softmax_cross_entropy@softmax_cross_entropy"),
    ),
    Part(
        id="ex10.my_sgd", points=1, cases=_sgd_cases, expected=_sgd_expected, compare=COMPARE,
        call=call_sgd, source_check=OWN_ENGINE, timeout_s=TIMEOUT_S,
        arg_names=("w", "b", "grads_w", "grads_b", "lr", "momentum"),
        output_names=("params after each step",), hints=SGD_HINTS,
    ),
    Part(
        id="ex10.my_train_step", points=2, cases=_train_cases, expected=_train_expected,
        compare=COMPARE, call=call_train_step, source_check=OWN_ENGINE, timeout_s=TIMEOUT_S,
        arg_names=("x", "y", "W1", "b1", "W2", "b2", "lr", "momentum", "num_steps"),
        output_names=("losses", "W1", "b1", "W2", "b2"),
        uses=("ex10.my_linear", "ex10.my_cross_entropy", "ex10.my_sgd", *ENGINE),
    ),
]
