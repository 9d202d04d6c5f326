"""edu_dl.gradcheck: passes on correct gradients, and catches a wrong one."""

from __future__ import annotations

import numpy as np
import pytest

import edu_dl as ed
from edu_dl.autograd import ops


class WrongSquare(ops.Op):
    """z = x^2 with a deliberately wrong VJP (forgets the factor 2)."""

    def forward(self, xp, x):
        self.saved = x
        return x * x

    def backward(self, grad):
        return (grad * self.saved,)


class RightSquare(WrongSquare):
    def backward(self, grad):
        return (2 * grad * self.saved,)


def test_passes_on_a_correct_function():
    rng = np.random.default_rng(0)
    x = ed.tensor(rng.standard_normal((3, 4)), requires_grad=True)
    w = ed.tensor(rng.standard_normal((4, 2)), requires_grad=True)
    report = ed.gradcheck(lambda a, b: ((a @ b).tanh() * a.sum(axis=1, keepdims=True)), x, w)
    assert report.passed and bool(report)
    assert len(report.errors) == 2 and report.shapes == [(3, 4), (4, 2)]
    assert all(e < 1e-7 for e in report.errors)
    assert "gradcheck passed" in str(report) and "BAD" not in str(report)


def test_a_custom_op_with_the_right_backward_passes():
    x = ed.tensor([0.5, -1.5, 2.0], requires_grad=True)
    assert ed.gradcheck(lambda a: RightSquare.apply(a), x).passed


def test_fails_on_a_wrong_backward():
    x = ed.tensor([0.5, -1.5, 2.0], requires_grad=True)
    report = ed.gradcheck(lambda a: WrongSquare.apply(a), x)
    assert not report.passed and not bool(report)
    text = str(report)
    assert "FAILED" in text and "BAD" in text
    assert report.errors[0] > 0.1  # analytic x against numeric 2x: relative error 1/3
    np.testing.assert_allclose(report.errors[0], 1 / 3, rtol=1e-6)


def test_only_the_wrong_input_is_flagged():
    x = ed.tensor([0.5, 2.0], requires_grad=True)
    y = ed.tensor([1.5, -1.0], requires_grad=True)
    report = ed.gradcheck(lambda a, b: WrongSquare.apply(a) + b * b, x, y)
    assert not report.passed
    assert report.errors[0] > 0.1 and report.errors[1] < 1e-7
    lines = str(report).splitlines()
    assert lines[1].lstrip().startswith("BAD input 0") and lines[2].lstrip().startswith("ok")


def test_float32_inputs_are_checked_in_float64_and_left_untouched():
    values = np.array([0.3, -0.7, 1.1], dtype=np.float32)
    x = ed.tensor(values.copy(), requires_grad=True)
    report = ed.gradcheck(lambda a: (a * a).exp(), x)
    assert report.passed, str(report)
    np.testing.assert_array_equal(x.numpy(), values)  # the nudges happen on a private copy
    assert x.dtype == np.float32 and x.grad is None


def test_integer_and_constant_inputs_pass_through():
    rng = np.random.default_rng(1)
    logits = ed.tensor(rng.standard_normal((4, 3)), requires_grad=True)
    labels = ed.tensor(np.array([0, 2, 1, 2]))
    report = ed.gradcheck(lambda z, y: ops.softmax_cross_entropy(z, y), logits, labels)
    assert report.passed, str(report)
    assert len(report.errors) == 1
    report = ed.gradcheck(lambda z, y, s: ops.softmax_cross_entropy(z * s, y), logits,
                          np.array([0, 2, 1, 2]), 2.0)
    assert report.passed, str(report)


def test_input_that_does_not_influence_the_output_has_zero_gradient():
    x = ed.tensor([1.0, 2.0], requires_grad=True)
    y = ed.tensor([3.0], requires_grad=True)
    report = ed.gradcheck(lambda a, b: a * 2, x, y)
    assert report.passed and report.errors[1] == 0.0


def test_needs_an_input_that_requires_grad():
    with pytest.raises(ValueError, match="requires_grad"):
        ed.gradcheck(lambda a: a * 2, ed.tensor([1.0]))


def test_rel_error():
    assert ed.rel_error(np.array([1.0, 2.0]), np.array([1.0, 2.0])) == 0.0
    assert ed.rel_error(np.array([1.0]), np.array([3.0])) == pytest.approx(0.5)
    assert ed.rel_error(np.array([0.0]), np.array([1e-12])) == pytest.approx(1e-4)
    assert ed.rel_error(np.zeros(0), np.zeros(0)) == 0.0
