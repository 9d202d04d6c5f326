"""Exercise 15's parts: the oracles agree with the solution notebook; wrong answers get hints."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import nbformat
import numpy as np
import pytest
from fixtures.exercise_helpers import course_module, run_check, solution_namespace

from edu_dl.grading.authoring import spec
from edu_dl.grading.trust import source as trusted_source

ex15 = course_module("ex15")

SOLUTION = Path(__file__).resolve().parents[2] / "solutions" / "15_shootout.ipynb"


def solutions() -> dict[str, Any]:
    return solution_namespace("15_shootout.ipynb")


FUNCTIONS = {
    "ex15.adam_step": "adam_step",
    "ex15.keras_adam_step": "keras_adam_step",
    "ex15.max_rel_diff": "max_rel_diff",
    "ex15.squared_error_losses": "squared_error_losses",
    "ex15.squared_error_grads": "squared_error_grads",
    "ex15.matching_lr": "matching_lr",
}


run = run_check


def test_every_part_has_a_solution() -> None:
    assert {p.id for p in ex15.PARTS} == set(FUNCTIONS)


def test_keras_adam_is_not_pytorch_adam(capsys: pytest.CaptureFixture[str]) -> None:
    ok, out = run(capsys, "ex15.adam_step", solutions()["keras_adam_step"])
    assert not ok  # one output, not three
    ok, out = run(capsys, "ex15.keras_adam_step", lambda *a: solutions()["adam_step"](*a)[0])
    assert not ok
    assert "expected" in out and "that is PyTorch's Adam" in out


def test_adam_without_bias_correction(capsys: pytest.CaptureFixture[str]) -> None:
    def adam(p, g, m, v, t, lr, b1, b2, eps):
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        return p - lr * m / (np.sqrt(v) + eps), m, v

    ok, out = run(capsys, "ex15.adam_step", adam)
    assert not ok
    assert "output 0 (p_new)" in out and "max abs error" in out
    assert "hint: bias correction missing" in out


def test_adam_keras_style_gets_the_keras_hint(capsys: pytest.CaptureFixture[str]) -> None:
    keras = solutions()["keras_adam_step"]

    def adam(p, g, m, v, t, lr, b1, b2, eps):
        return keras(p, g, m, v, t, lr, b1, b2, eps), b1 * m + (1 - b1) * g, \
            b2 * v + (1 - b2) * g * g

    ok, out = run(capsys, "ex15.adam_step", adam)
    assert not ok and "that is Keras's Adam" in out


def test_rel_diff_divided_by_the_wrong_one(capsys: pytest.CaptureFixture[str]) -> None:
    ok, out = run(capsys, "ex15.max_rel_diff",
                  lambda a, b: float(np.max(np.abs(a - b)) / np.max(np.abs(a))))
    assert not ok and "case 1 of 2" in out and "expected 0.75, got 0.6" in out
    assert "hint: divide by the REFERENCE" in out


def test_tf_loss_as_mean_over_everything(capsys: pytest.CaptureFixture[str]) -> None:
    def losses(y_hat, y):
        d2 = (y_hat - y) ** 2
        return float(d2.mean()), float(d2.sum()), float(d2.sum() / (2 * len(d2)))

    ok, out = run(capsys, "ex15.squared_error_losses", losses)
    assert not ok and "output 0 (tf_program)" in out and "divide the total by N" in out


def test_gradients_without_the_two(capsys: pytest.CaptureFixture[str]) -> None:
    def grads(y_hat, y):
        n, d = len(y_hat), y_hat - y
        return 2 * d / n, d, d / n

    ok, out = run(capsys, "ex15.squared_error_grads", grads)
    assert not ok and "output 1 (torch_program)" in out and "keep the 2" in out


def sgd_path(lr: float, loss: str, steps: int = 5) -> np.ndarray:
    """Weights after SGD steps on a small linear fit, the gradient from torch.autograd on the
    program's own loss (not the oracle's scale table)."""
    import torch

    rng = np.random.default_rng(3)
    X = torch.tensor(rng.standard_normal((12, 3)))
    y = torch.tensor(rng.standard_normal((12, 2)))
    w = torch.zeros((3, 2), dtype=torch.float64, requires_grad=True)
    for _ in range(steps):
        d = X @ w - y
        value = {"tf": (d**2).sum(dim=1).mean(), "torch": (d**2).sum(),
                 "caffe": (d**2).sum() / (2 * len(X))}[loss]
        (grad,) = torch.autograd.grad(value, w)
        w = (w - lr * grad).detach().requires_grad_(True)
    return w.detach().numpy()


@pytest.mark.parametrize(("loss_from", "loss_to"), [("torch", "tf"), ("tf", "caffe"),
                                                    ("caffe", "torch")])
def test_matching_lr_oracle_gives_the_same_sgd_path(loss_from: str, loss_to: str) -> None:
    lr = 1e-3
    matched = ex15._matching_lr(lr, loss_from, loss_to, 12, "sgd")
    np.testing.assert_allclose(sgd_path(matched, loss_to), sgd_path(lr, loss_from), rtol=1e-10)


def test_matching_lr_with_adam_is_the_same_rate() -> None:
    """Adam on a loss scaled by a constant takes the same steps (epsilon aside)."""
    import torch

    steps = []
    for scale in (1.0, 1 / 24):
        w = torch.zeros(3, dtype=torch.float64, requires_grad=True)
        opt = torch.optim.Adam([w], lr=1e-2, eps=1e-16)
        for _ in range(4):
            opt.zero_grad()
            (scale * ((w - torch.arange(3.0, dtype=torch.float64)) ** 2).sum()).backward()
            opt.step()
        steps.append(w.detach().numpy().copy())
    np.testing.assert_allclose(steps[0], steps[1], rtol=1e-9)
    assert ex15._matching_lr(1e-2, "torch", "tf", 24, "adam") == 1e-2


@pytest.mark.parametrize(("wrong", "hint"), [
    (lambda lr, a, b, n, o: lr * {"tf": 1 / n, "torch": 1.0, "caffe": 1 / (2 * n)}[b]
     / {"tf": 1 / n, "torch": 1.0, "caffe": 1 / (2 * n)}[a] if o == "sgd" else lr,
     "your ratio is upside down"),
    (lambda lr, a, b, n, o: lr * {"tf": 1 / n, "torch": 1.0, "caffe": 1 / (2 * n)}[a]
     / {"tf": 1 / n, "torch": 1.0, "caffe": 1 / (2 * n)}[b], "Adam divides each step"),
    (lambda lr, a, b, n, o: lr * {"tf": 1 / n, "torch": 1.0, "caffe": 1 / n}[a]
     / {"tf": 1 / n, "torch": 1.0, "caffe": 1 / n}[b] if o == "sgd" else lr,
     "Caffe's EuclideanLoss divides by 2N"),
])
def test_matching_lr_mistakes_get_their_hints(capsys: pytest.CaptureFixture[str], wrong: Any,
                                              hint: str) -> None:
    ok, out = run(capsys, "ex15.matching_lr", wrong)
    assert not ok and f"hint: {hint}" in out, out


def test_matching_lr_hints_stay_quiet_on_noise(capsys: pytest.CaptureFixture[str]) -> None:
    ok, out = run(capsys, "ex15.matching_lr", lambda lr, a, b, n, o: 1.7 * lr + 1e-3)
    assert not ok and "hint:" not in out, out


def adam_by_torch(p, g, m, v, t, lr, beta1, beta2, eps):
    import torch

    param = torch.tensor(p, requires_grad=True)
    opt = torch.optim.Adam([param], lr=lr, betas=(beta1, beta2), eps=eps, foreach=False)
    param.grad = torch.tensor(g)
    opt.state[param] = {"step": torch.tensor(float(t - 1)), "exp_avg": torch.tensor(m),
                        "exp_avg_sq": torch.tensor(v)}
    opt.step()
    state = opt.state[param]
    return (param.detach().numpy().copy(), state["exp_avg"].numpy().copy(),
            state["exp_avg_sq"].numpy().copy())


def losses_by_torch(y_hat, y):
    import torch.nn.functional as F

    total = F.mse_loss(torch_tensor(y_hat), torch_tensor(y), reduction="sum").item()
    return total / len(y_hat), total, total / (2 * len(y_hat))


def torch_tensor(a):
    import torch

    return torch.tensor(a, dtype=torch.float64)


@pytest.mark.parametrize(("part_id", "fn", "message"), [
    ("ex15.adam_step", adam_by_torch, "this part asks you to write the Adam step yourself"),
    ("ex15.squared_error_losses", losses_by_torch,
     "this part asks you to write the squared errors yourself")])
def test_the_oracles_library_is_refused(capsys: pytest.CaptureFixture[str], part_id: str,
                                        fn: Any, message: str) -> None:
    ok, out = run(capsys, part_id, fn)
    assert not ok
    assert out.startswith(f"✗ {part_id}: the values are right, but {message}")


@pytest.mark.parametrize("part", [p for p in ex15.PARTS if p.source_check is not None],
                         ids=lambda p: p.id)
def test_the_solutions_source_passes(part: spec.Part) -> None:
    found = trusted_source.find_source(nbformat.read(SOLUTION, as_version=4), part.id)
    assert found is not None and part.source_check is not None
    assert part.source_check(found).ok
