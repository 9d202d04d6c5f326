"""Exercise 15, the shoot-out: two Adams, three squared-error losses, and the learning rate that
makes twins with different losses (and optimizers) take the same steps.

The oracles are independent of the student's task text: ``torch.optim.Adam`` itself for PyTorch's
Adam; for Keras's Adam the lecture's identity (it is PyTorch's Adam with epsilon replaced by
epsilon / sqrt(1 - beta2^t)), again run through ``torch.optim.Adam``; ``torch.autograd`` on
PyTorch's own losses for the squared errors; ``edu_dl.models.spec.loss_scale`` (the twins' own) and
a numeric SGD or Adam step for the matching learning rate.

Judged outside the sandbox: every value against the oracle, and for the Adams and the squared
errors the submitted source, which may not call the optimizers and losses the oracles are
(``torch.optim.Adam``, ``edu_dl.optim.Adam``, ``mse_loss``, autograd, ...).

The private half: ``edu_dl.harness.ex15`` holds the public views and rule its hints use.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from edu_dl.grading.authoring.hints import Mistake
from edu_dl.grading.authoring.source import names_check
from edu_dl.grading.authoring.spec import Part, tolerance
from edu_dl.harness.ex15 import SeveralOutputs, first_output

Array = np.ndarray
Case = tuple[Any, ...]
CLOSE = tolerance(rtol=1e-7, atol=1e-12)




# --------------------------------------------------------------------------- Adam


def _adam_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    """(p, g, m, v, t, lr, beta1, beta2, eps): a state after t - 1 steps and the t-th gradient."""
    if not hidden:
        p = np.array([1.0, -2.0, 0.5])
        g = np.array([0.1, -0.3, 0.0])
        first = (p, g, np.zeros(3), np.zeros(3), 1, 0.1, 0.9, 0.999, 1e-8)
        later = (rng.standard_normal((2, 3)), rng.standard_normal((2, 3)),
                 0.1 * rng.standard_normal((2, 3)), 0.01 * rng.random((2, 3)), 10, 0.01, 0.9,
                 0.999, 1e-8)
        # tiny gradients: sqrt(v_hat) is comparable to eps, where the two Adams part ways
        tiny = (rng.standard_normal(4), 1e-9 * rng.standard_normal(4), np.zeros(4),
                np.zeros(4), 1, 1e-3, 0.9, 0.999, 1e-8)
        return [first, later, tiny]
    cases: list[Case] = []
    for _ in range(4):
        shape = tuple(int(d) for d in rng.integers(1, 5, size=int(rng.integers(1, 3))))
        t = int(rng.choice([1, 2, int(rng.integers(3, 2000))]))
        scale = float(rng.choice([1.0, 1e-3, 1e-8]))
        cases.append((rng.standard_normal(shape), scale * rng.standard_normal(shape),
                      scale * 0.1 * rng.standard_normal(shape), scale**2 * rng.random(shape), t,
                      float(rng.choice([1e-3, 1e-2, 0.1])), float(rng.uniform(0.8, 0.95)),
                      float(rng.choice([0.99, 0.999])), float(rng.choice([1e-8, 1e-7, 1e-6]))))
    return cases


def _torch_adam(p: Array, g: Array, m: Array, v: Array, t: int, lr: float, beta1: float,
                beta2: float, eps: float) -> tuple[Array, Array, Array]:
    """One step of torch.optim.Adam from the state (m, v) after t - 1 steps."""
    import torch

    param = torch.tensor(p, dtype=torch.float64, requires_grad=True)
    opt = torch.optim.Adam([param], lr=lr, betas=(beta1, beta2), eps=eps, foreach=False)
    param.grad = torch.tensor(g, dtype=torch.float64)
    opt.state[param] = {"step": torch.tensor(float(t - 1)),
                        "exp_avg": torch.tensor(m, dtype=torch.float64),
                        "exp_avg_sq": torch.tensor(v, dtype=torch.float64)}
    opt.step()
    state = opt.state[param]
    return (param.detach().numpy().copy(), state["exp_avg"].numpy().copy(),
            state["exp_avg_sq"].numpy().copy())


def _keras_adam(p: Array, g: Array, m: Array, v: Array, t: int, lr: float, beta1: float,
                beta2: float, eps: float) -> Array:
    """Keras's Adam = PyTorch's with eps / sqrt(1 - beta2^t) in place of eps (lecture 15, s. 4)."""
    return _torch_adam(p, g, m, v, t, lr, beta1, beta2, eps / np.sqrt(1 - beta2**t))[0]


def _adam_variant(case: Case, correct: bool = True, eps_in_sqrt: bool = False,
                  keras: bool = False) -> Array:
    """Typical wrong (and the other) Adams on a case's arguments, for hints."""
    p, g, m, v, t, lr, b1, b2, eps = case
    m = b1 * m + (1 - b1) * g
    v = b2 * v + (1 - b2) * g * g
    if keras:
        return p - lr * np.sqrt(1 - b2**t) / (1 - b1**t) * m / (np.sqrt(v) + eps)
    m_hat, v_hat = (m / (1 - b1**t), v / (1 - b2**t)) if correct else (m, v)
    denom = np.sqrt(v_hat + eps) if eps_in_sqrt else np.sqrt(v_hat) + eps
    return p - lr * m_hat / denom


def _adam_mistake(message: str, **kw: bool) -> Mistake:
    """The new parameter as another Adam computes it (whether or not the moments come too)."""
    return Mistake(lambda e, a: _adam_variant(a, **kw), message, view=first_output,
                   rtol=1e-7, atol=1e-12)


ADAM_SOURCE = names_check(forbidden=[(
    ("Adam", "AdamW", "optim", "adam_update", "AdamState", "torch", "keras", "tensorflow"),
    "this part asks you to write the Adam step yourself, from its formula: the check compares "
    "with torch.optim.Adam (do not call an optimizer: torch.optim, edu_dl.optim, "
    "edu_dl.models.spec.adam_update, Keras)")])


# --------------------------------------------------------------------------- max rel. difference


def _rel_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    if not hidden:
        b = np.array([1.0, -4.0, 2.0])
        return [(b + np.array([0.0, 0.0, 3.0]), b), (rng.standard_normal((2, 3)),
                                                      rng.standard_normal((2, 3)))]
    cases: list[Case] = []
    for _ in range(3):
        shape = tuple(int(d) for d in rng.integers(1, 6, size=2))
        b = float(rng.choice([1.0, 1e-3, 1e3])) * rng.standard_normal(shape)
        cases.append((b + 1e-3 * rng.standard_normal(shape) * np.abs(b).max(), b))
    return cases


def _rel(a: Array, b: Array) -> float:
    """max_i |a_i - b_i| / max_i |b_i|, the lecture's measure (b is the reference)."""
    return float(np.max(np.abs(np.asarray(a) - np.asarray(b))) / np.max(np.abs(np.asarray(b))))


# --------------------------------------------------------------------------- squared errors


def _sq_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    shapes = [(4, 3), (2, 5)] if not hidden else [
        (int(rng.integers(1, 8)), int(rng.integers(1, 8))) for _ in range(3)]
    return [(rng.standard_normal(s), rng.standard_normal(s)) for s in shapes]


def _torch_losses(y_hat: Array, y: Array) -> tuple[Any, ...]:
    """PyTorch's mse_loss (sum) scaled as each program writes it, and autograd's gradients."""
    import torch
    import torch.nn.functional as F

    n = y_hat.shape[0]
    values, grads = [], []
    for scale in (1.0 / n, 1.0, 1.0 / (2 * n)):  # TF program, PyTorch program, Caffe
        yh = torch.tensor(y_hat, dtype=torch.float64, requires_grad=True)
        loss = scale * F.mse_loss(yh, torch.tensor(y, dtype=torch.float64), reduction="sum")
        loss.backward()
        assert yh.grad is not None
        values.append(loss.item())
        grads.append(yh.grad.numpy().copy())
    return tuple(values), tuple(grads)


def _losses_expected(y_hat: Array, y: Array) -> tuple[float, float, float]:
    tf, torch_, caffe = _torch_losses(y_hat, y)[0]
    return tf, torch_, caffe


def _grads_expected(y_hat: Array, y: Array) -> tuple[Array, Array, Array]:
    tf, torch_, caffe = _torch_losses(y_hat, y)[1]
    return tf, torch_, caffe


LOSS_SOURCE = names_check(forbidden=[(
    ("mse_loss", "MSELoss", "loss_and_grad", "torch", "backward", "grad", "autograd",
     "tensorflow", "keras"),
    "this part asks you to write the squared errors yourself, in NumPy: the check compares with "
    "PyTorch's mse_loss and autograd (do not call mse_loss, MSELoss, .backward() or "
    "edu_dl.models.spec.loss_and_grad)")])


# --------------------------------------------------------------------------- a matching rate

LOSS_NAMES = {"tf": "mean_row_sum", "torch": "sum", "caffe": "euclidean"}  # edu_dl.models.spec'
LOSSES = tuple(LOSS_NAMES)


def _lr_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    # (lr, loss_from, loss_to, n, optimizer)
    if not hidden:
        return [(1e-3, "torch", "tf", 64, "sgd"), (0.1, "tf", "caffe", 32, "sgd"),
                (1e-2, "caffe", "torch", 10, "sgd"), (1e-3, "torch", "caffe", 64, "adam")]
    cases: list[Case] = []
    for optimizer in ("sgd", "sgd", "sgd", "adam"):
        start, goal = rng.choice(len(LOSSES), size=2, replace=False)
        cases.append((float(10 ** rng.uniform(-4, -1)), LOSSES[int(start)], LOSSES[int(goal)],
                      int(rng.integers(2, 257)), optimizer))
    return cases


def _matching_lr(lr: float, loss_from: str, loss_to: str, n: int, optimizer: str, *,
                 inverted: bool = False, caffe_as_tf: bool = False,
                 adam_like_sgd: bool = False) -> float:
    """The twins' own loss scales (edu_dl.models.spec.loss_scale): SGD's step is lr x scale x the
    summed-loss gradient, so the rate goes with scale_from / scale_to; Adam divides the scale
    out (up to epsilon). The keywords replay mistakes."""
    from edu_dl.models.spec import loss_scale

    def scale(name: str) -> float:
        return loss_scale(LOSS_NAMES["tf" if caffe_as_tf and name == "caffe" else name], int(n))

    if optimizer == "adam" and not adam_like_sgd:
        return float(lr)
    ratio = scale(loss_from) / scale(loss_to)
    return float(lr / ratio if inverted else lr * ratio)


def _lr_mistake(message: str, **variant: bool) -> Mistake:
    def replay(e: Any, a: Case) -> float | None:
        wrong = _matching_lr(*a, inverted=variant.get("inverted", False),
                             caffe_as_tf=variant.get("caffe_as_tf", False),
                             adam_like_sgd=variant.get("adam_like_sgd", False))
        return None if abs(wrong - float(e)) <= 1e-9 * abs(float(e)) else wrong

    return Mistake(replay, message, rtol=1e-9, atol=0.0)


LR_HINTS = (
    _lr_mistake("your ratio is upside down: a loss that is c times smaller has a gradient c times "
                "smaller, so it needs a rate c times LARGER to take the same step",
                inverted=True),
    _lr_mistake("Adam divides each step by the root of its running mean of squared gradients: a "
                "constant factor on the loss cancels, so the rate stays the same",
                adam_like_sgd=True),
    _lr_mistake("Caffe's EuclideanLoss divides by 2N, not N: its rate differs from the TF "
                "program's by a factor 2", caffe_as_tf=True),
)
LR_SOURCE = names_check(forbidden=[(("loss_scale",), "this part asks you to work out the "
                                    "factor yourself (do not call edu_dl.models.spec.loss_scale)")])


MOMENTS = ("update the moments first: m = beta1 * m + (1 - beta1) * g, v = beta2 * v + "
           "(1 - beta2) * g**2, and return the new ones")

PARTS = [
    Part(
        id="ex15.adam_step", points=2, cases=_adam_cases, expected=_torch_adam, compare=CLOSE,
        arg_names=("p", "g", "m", "v", "t", "lr", "beta1", "beta2", "eps"),
        output_names=("p_new", "m_new", "v_new"), source_check=ADAM_SOURCE,
        hints=(
            _adam_mistake("that is Keras's Adam (epsilon added to the uncorrected sqrt(v)): here "
                          "divide the bias-corrected averages, p - lr * m_hat / (sqrt(v_hat) + "
                          "eps)", keras=True),
            _adam_mistake("bias correction missing: m_hat = m / (1 - beta1**t), v_hat = v / "
                          "(1 - beta2**t)", correct=False),
            _adam_mistake("eps goes outside the square root: sqrt(v_hat) + eps",
                          eps_in_sqrt=True),
            Mistake(lambda e, a: a[2], MOMENTS, output=1, rtol=1e-7, atol=1e-12),
            Mistake(lambda e, a: a[3], MOMENTS, output=2, rtol=1e-7, atol=1e-12),
            Mistake(lambda e, a: a[6] * a[3] + (1 - a[6]) * a[1] ** 2,
                    "v uses beta2, not beta1", output=2, rtol=1e-7, atol=1e-12),
        ),
    ),
    Part(
        id="ex15.keras_adam_step", points=2, cases=_adam_cases, expected=_keras_adam,
        compare=CLOSE, arg_names=("p", "g", "m", "v", "t", "lr", "beta1", "beta2", "eps"),
        source_check=ADAM_SOURCE,
        hints=(
            _adam_mistake("that is PyTorch's Adam: Keras corrects the RATE, lr_t = lr * sqrt(1 - "
                          "beta2**t) / (1 - beta1**t), and adds eps to the UNcorrected sqrt(v)"),
            SeveralOutputs("return only the new parameter p_new (the moments are PyTorch's, "
                           "unchanged)"),
            _adam_mistake("the rate needs the correction factor sqrt(1 - beta2**t) / (1 - "
                          "beta1**t)", correct=False),
        ),
    ),
    Part(
        id="ex15.max_rel_diff", points=1, cases=_rel_cases, expected=_rel,
        compare=tolerance(rtol=1e-9, atol=0.0), arg_names=("a", "b"),
        hints=(
            Mistake(lambda e, a: _rel(a[1], a[0]),
                    "divide by the REFERENCE's largest magnitude, max |b|, not max |a|",
                    rtol=1e-9, atol=0.0),
            Mistake(lambda e, a: np.max(np.abs(a[0] - a[1]) / np.abs(a[1])),
                    "one ratio of two maxima: max|a - b| / max|b|, not the largest elementwise "
                    "ratio", rtol=1e-9, atol=0.0),
            Mistake(lambda e, a: np.max(np.abs(a[0] - a[1])),
                    "that is the absolute difference: divide by max |b|", rtol=1e-9, atol=0.0),
        ),
    ),
    Part(
        id="ex15.squared_error_losses", points=1, cases=_sq_cases, expected=_losses_expected,
        compare=tolerance(rtol=1e-9, atol=1e-12), arg_names=("y_hat", "y"),
        output_names=("tf_program", "torch_program", "caffe_euclidean"),
        source_check=LOSS_SOURCE,
        hints=(
            Mistake(lambda e, a: np.mean((a[0] - a[1]) ** 2),
                    "the TF program sums each ROW, then averages over the N rows: divide the "
                    "total by N, not by N * D (that would be reduce_mean over everything)",
                    output=0, rtol=1e-7, atol=1e-12),
            Mistake(lambda e, a: np.sum((a[0] - a[1]) ** 2) / a[0].shape[0],
                    "Caffe's EuclideanLoss has a 2 in the denominator: sum / (2 N)",
                    output=2, rtol=1e-7, atol=1e-12),
            Mistake(lambda e, a: np.sum((a[0] - a[1]) ** 2) / 2,
                    "Caffe divides by 2 N (N = rows), not by 2", output=2, rtol=1e-7, atol=1e-12),
        ),
    ),
    Part(
        id="ex15.squared_error_grads", points=2, cases=_sq_cases, expected=_grads_expected,
        compare=tolerance(rtol=1e-9, atol=1e-12), arg_names=("y_hat", "y"),
        output_names=("tf_program", "torch_program", "caffe_euclidean"),
        source_check=LOSS_SOURCE,
        hints=(
            Mistake(lambda e, a: a[0] - a[1],
                    "d/dy_hat of (y_hat - y)**2 is 2 (y_hat - y): keep the 2", output=1,
                    rtol=1e-7, atol=1e-12),
            Mistake(lambda e, a: 2 * (a[1] - a[0]),
                    "sign: the gradient with respect to y_hat is +2 (y_hat - y)", output=1,
                    rtol=1e-7, atol=1e-12),
            Mistake(lambda e, a: 2 * (a[0] - a[1]) / a[0].size,
                    "the TF program divides by N (rows), not N * D", output=0,
                    rtol=1e-7, atol=1e-12),
            Mistake(lambda e, a: (a[0] - a[1]) / (2 * a[0].shape[0]),
                    "Caffe's gradient: the 2 of the square cancels the 2 of 2N, giving "
                    "(y_hat - y) / N", output=2, rtol=1e-7, atol=1e-12),
        ),
    ),
    Part(
        id="ex15.matching_lr", points=2, cases=_lr_cases, expected=_matching_lr,
        compare=tolerance(rtol=1e-9, atol=0.0),
        arg_names=("lr", "loss_from", "loss_to", "n", "optimizer"), source_check=LR_SOURCE,
        hints=LR_HINTS,
    ),
]
