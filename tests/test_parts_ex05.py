"""Exercise 5's parts: a VJP rule a library computes fails its source check; the solutions pass."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import nbformat
import numpy as np
import pytest
from exercise_helpers import course_module, run_check

import edu_dl
from edu_dl import models
from edu_dl.grading.trust import source as trusted_source

pytestmark = pytest.mark.usefixtures("in_solutions")  # check() finds ./parts there

ex05 = course_module("ex05")
NOTEBOOK = Path(__file__).resolve().parents[1] / "solutions" / "05_autograd_from_scratch.ipynb"
BY_HAND = "this part asks you to write the VJP rule yourself"


def relu_by_autograd(dout, x):
    t = edu_dl.tensor(x, requires_grad=True)
    t.relu().backward(edu_dl.tensor(dout))
    return t.grad.numpy()


def softmax_ce_by_library(logits, y):
    return models.loss_and_grad(np, logits, y, "cross_entropy")


@pytest.mark.parametrize(("part_id", "fn"), [("ex05.relu_backward", relu_by_autograd),
                                             ("ex05.softmax_cross_entropy",
                                              softmax_ce_by_library)])
def test_a_library_rule_is_refused(capsys: pytest.CaptureFixture[str], part_id: str,
                                   fn: Any) -> None:
    ok, out = run_check(capsys, part_id, fn)
    assert not ok
    assert out.startswith(f"✗ {part_id}: the values are right, but {BY_HAND}")


@pytest.mark.parametrize("part", ex05.PARTS, ids=lambda p: p.id)
def test_the_solutions_source_passes(part: Any) -> None:
    found = trusted_source.find_source(nbformat.read(NOTEBOOK, as_version=4), part.id)
    assert found is not None and part.source_check is not None
    assert part.source_check(found).ok
