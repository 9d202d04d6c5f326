"""Exercise 9's parts: the oracles agree with the solution notebook, and wrong answers get hints."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import nbformat
import numpy as np
import pytest
from exercise_helpers import course_module, run_check, solution_namespace

from edu_dl.grading import checking, protocol, spec
from edu_dl.grading.trust import source as trusted_source

ex09 = course_module("ex09")

SOLUTION = Path(__file__).resolve().parents[1] / "solutions" / "09_shootout.ipynb"


def solutions() -> dict[str, Any]:
    return solution_namespace("09_shootout.ipynb")


FUNCTIONS = {
    "ex09.adam_step": "adam_step",
    "ex09.keras_adam_step": "keras_adam_step",
    "ex09.max_rel_diff": "max_rel_diff",
    "ex09.squared_error_losses": "squared_error_losses",
    "ex09.squared_error_grads": "squared_error_grads",
    "ex09.code_lines": "code_lines",
}


run = run_check


def test_every_part_has_a_solution() -> None:
    assert {p.id for p in ex09.PARTS} == set(FUNCTIONS)


@pytest.mark.parametrize("part", ex09.PARTS, ids=lambda p: p.id)
@pytest.mark.parametrize("seed", [None, 0, 1, 2])
def test_oracle_agrees_with_the_solution(part: spec.Part, seed: int | None) -> None:
    fn = solutions()[FUNCTIONS[part.id]]
    hidden = seed is not None
    cases = protocol.roundtrip(part.cases(np.random.default_rng(seed or 0), hidden))
    assert cases
    for i, args in enumerate(cases):
        expected = part.expected(*args)
        got = part.call(fn, args)
        checking._encode_result(i, got)  # the grader can store it without pickle
        verdict = part.compare(expected, got)
        assert verdict.ok, f"case {i}: {verdict.message}"


@pytest.mark.parametrize("part_id", FUNCTIONS)
def test_the_stub_is_not_implemented_yet(capsys: pytest.CaptureFixture[str],
                                         part_id: str) -> None:
    def stub(*args: Any) -> Any:
        raise NotImplementedError()

    ok, out = run(capsys, part_id, stub)
    assert not ok and out.strip() == f"✗ {part_id}: not implemented yet"


def test_keras_adam_is_not_pytorch_adam(capsys: pytest.CaptureFixture[str]) -> None:
    ok, out = run(capsys, "ex09.adam_step", solutions()["keras_adam_step"])
    assert not ok  # one output, not three
    ok, out = run(capsys, "ex09.keras_adam_step", lambda *a: solutions()["adam_step"](*a)[0])
    assert not ok
    assert "expected" in out and "that is PyTorch's Adam" in out


def test_adam_without_bias_correction(capsys: pytest.CaptureFixture[str]) -> None:
    def adam(p, g, m, v, t, lr, b1, b2, eps):
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        return p - lr * m / (np.sqrt(v) + eps), m, v

    ok, out = run(capsys, "ex09.adam_step", adam)
    assert not ok
    assert "output 0 (p_new)" in out and "max abs error" in out
    assert "hint: bias correction missing" in out


def test_adam_keras_style_gets_the_keras_hint(capsys: pytest.CaptureFixture[str]) -> None:
    keras = solutions()["keras_adam_step"]

    def adam(p, g, m, v, t, lr, b1, b2, eps):
        return keras(p, g, m, v, t, lr, b1, b2, eps), b1 * m + (1 - b1) * g, \
            b2 * v + (1 - b2) * g * g

    ok, out = run(capsys, "ex09.adam_step", adam)
    assert not ok and "that is Keras's Adam" in out


def test_rel_diff_divided_by_the_wrong_one(capsys: pytest.CaptureFixture[str]) -> None:
    ok, out = run(capsys, "ex09.max_rel_diff",
                  lambda a, b: float(np.max(np.abs(a - b)) / np.max(np.abs(a))))
    assert not ok and "case 1 of 2" in out and "expected 0.75, got 0.6" in out
    assert "hint: divide by the REFERENCE" in out


def test_tf_loss_as_mean_over_everything(capsys: pytest.CaptureFixture[str]) -> None:
    def losses(y_hat, y):
        d2 = (y_hat - y) ** 2
        return float(d2.mean()), float(d2.sum()), float(d2.sum() / (2 * len(d2)))

    ok, out = run(capsys, "ex09.squared_error_losses", losses)
    assert not ok and "output 0 (tf_program)" in out and "divide the total by N" in out


def test_gradients_without_the_two(capsys: pytest.CaptureFixture[str]) -> None:
    def grads(y_hat, y):
        n, d = len(y_hat), y_hat - y
        return 2 * d / n, d, d / n

    ok, out = run(capsys, "ex09.squared_error_grads", grads)
    assert not ok and "output 1 (torch_program)" in out and "keep the 2" in out


def test_code_lines_counting_docstrings(capsys: pytest.CaptureFixture[str]) -> None:
    def count(source):
        return sum(1 for line in source.splitlines()
                   if line.strip() and not line.strip().startswith("#"))

    ok, out = run(capsys, "ex09.code_lines", count)
    assert not ok and "case 2 of 3" in out and "expected 2, got 3" in out
    assert "docstrings are not code" in out


def test_code_lines_counting_every_line(capsys: pytest.CaptureFixture[str]) -> None:
    ok, out = run(capsys, "ex09.code_lines", lambda s: len(s.splitlines()))
    assert not ok and "that counts every line" in out


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
    ("ex09.adam_step", adam_by_torch, "this part asks you to write the Adam step yourself"),
    ("ex09.squared_error_losses", losses_by_torch,
     "this part asks you to write the squared errors yourself")])
def test_the_oracles_library_is_refused(capsys: pytest.CaptureFixture[str], part_id: str,
                                        fn: Any, message: str) -> None:
    ok, out = run(capsys, part_id, fn)
    assert not ok
    assert out.startswith(f"✗ {part_id}: the values are right, but {message}")


@pytest.mark.parametrize("part", [p for p in ex09.PARTS if p.source_check is not None],
                         ids=lambda p: p.id)
def test_the_solutions_source_passes(part: spec.Part) -> None:
    found = trusted_source.find_source(nbformat.read(SOLUTION, as_version=4), part.id)
    assert found is not None and part.source_check is not None
    assert part.source_check(found).ok
