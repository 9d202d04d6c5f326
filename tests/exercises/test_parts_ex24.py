"""Exercise 24, the capstone: a linear model (the lecture's baseline) and a constant answer stay
under the accuracy line, the hidden labels never reach the student's side, the source checks tell
a library's classifier and the wrong framework apart, and the written part's rubric adds up and
stays with the source. That the solution's two classifiers pass, on visible and hidden samples and
both ways (check() and the grader's judge), is tests/exercises/test_parts_trusted.py's, as for
every part: each of its fits costs about a second of CPU."""

from __future__ import annotations

from typing import Any

import nbformat
import numpy as np
import pytest
from fixtures.exercise_helpers import (
    SOLUTIONS,
    assert_nothing_retyped,
    checked,
    course_part,
)

from edu_dl.grading import Withheld
from edu_dl.grading.authoring import rubric, spec
from edu_dl.grading.nbgrader import student_version

pytestmark = pytest.mark.usefixtures("in_solutions")  # check() finds ./parts there
NOTEBOOK = SOLUTIONS / "24_capstone.ipynb"


def softmax_regression(x_train: Any, y_train: Any, x_eval: Any) -> Any:
    """The lecture's baseline (about a third right), written with the course's engine."""
    from edu_dl import nn, optim
    from edu_dl.autograd.tensor import Tensor

    layer = nn.Linear(40, 10, rng=np.random.default_rng(0))
    sgd = optim.SGD(layer.parameters(), lr=0.5)
    for _ in range(300):
        sgd.zero_grad()
        nn.CrossEntropyLoss()(layer(Tensor(x_train)), Tensor(y_train)).backward()
        sgd.step()
    return layer(Tensor(x_eval)).data.argmax(axis=1)


def test_a_linear_model_and_a_constant_answer_stay_under_the_line() -> None:
    ok, out = checked("ex24.classify", softmax_regression)
    assert not ok and "under the 0.55 this part asks for (550 right)" in out, out
    ok, out = checked("ex24.classify", lambda x_train, y_train, x_eval: np.full(len(x_eval), 3))
    assert not ok and "accuracy 0.1" in out, out


def test_the_hidden_labels_are_withheld_and_differ_from_the_public_ones() -> None:
    part = course_part("ex24.classify")
    (visible,) = part.cases(np.random.default_rng(0), False)
    (hidden,) = part.cases(np.random.default_rng(1), True)
    for case in (visible, hidden):
        assert isinstance(case[3], Withheld) and len(spec.given(case)) == 3
        assert case[0].shape == (4000, 40) and case[1].shape == (4000,)
    assert visible[2].shape == (1000, 40) and hidden[2].shape == (300, 40)
    assert not np.array_equal(visible[2][:300], hidden[2])
    # Another seed, another hidden sample: no student can learn the grader's from a run.
    (other,) = part.cases(np.random.default_rng(2), True)
    assert not np.array_equal(other[2], hidden[2])


MYTORCH = """
def fit_predict(x_train, y_train, x_eval):
    model = Linear(40, 10, np.random.default_rng(0))
    sgd = SGD(model.parameters(), lr=0.1)
    train_step(model, sgd, x_train, y_train)
    tape = Tape()
    return tape.values[model(tape, tape.input(x_eval))].argmax(axis=1)
"""
COURSE_ENGINE = """
def fit_predict(x_train, y_train, x_eval):
    model = nn.Linear(40, 10)
    loss = model(Tensor(x_train)).sum()
    loss.backward()
    return model(Tensor(x_eval)).data.argmax(axis=1)
"""
LIBRARY = """
def fit_predict(x_train, y_train, x_eval):
    return LogisticRegression().fit(x_train, y_train).predict(x_eval)
"""
WRONG_FRAMEWORK = """
def fit_predict(x_train, y_train, x_eval):
    model = torch.nn.Linear(40, 10)
    model(torch.from_numpy(x_train)).sum().backward()
    return model(torch.from_numpy(x_eval)).argmax(dim=1).numpy()
"""
UNTRAINED = """
def fit_predict_torch(x_train, y_train, x_eval):
    model = torch.nn.Linear(40, 10)
    return model(torch.from_numpy(x_eval)).argmax(dim=1).numpy()
"""


@pytest.mark.parametrize(("part_id", "source", "says"), [
    ("ex24.classify", MYTORCH, ""),
    ("ex24.classify", LIBRARY, "not a library's ready-made classifier"),
    ("ex24.classify", WRONG_FRAMEWORK, "trains with your own framework"),
    ("ex24.classify", COURSE_ENGINE, "the course's engine is not yours"),
    ("ex24.classify_torch", WRONG_FRAMEWORK, ""),
    ("ex24.classify_torch", MYTORCH, "this part trains with PyTorch"),
    ("ex24.classify_torch", UNTRAINED, "never calls backward()"),
])
def test_the_source_checks_name_the_framework_each_part_asks_for(
        part_id: str, source: str, says: str) -> None:
    verdict = course_part(part_id).source_check(source)  # type: ignore[misc]
    assert verdict.ok == (not says) and says in verdict.message, verdict


def test_the_written_part_has_a_rubric_that_stays_with_the_source() -> None:
    nb = nbformat.read(NOTEBOOK, as_version=4)
    criteria = rubric.of_notebook(nb, NOTEBOOK.name)
    assert list(criteria) == ["report"] and sum(c.points for c in criteria["report"]) == 3
    released = nbformat.read(SOLUTIONS.parent / "exercises" / NOTEBOOK.name, as_version=4)
    assert released == student_version(nb)  # the committed release is today's
    assert not any("edu_dl" in cell.metadata for cell in released.cells)
    assert released.metadata["edu_dl"] == {"budget": {"points": 1, "cpu_s": 120},
                                           "package": "mytorch"}


def test_nothing_is_retyped_from_a_lecture() -> None:
    assert_nothing_retyped(NOTEBOOK, {"fit_predict", "fit_predict_torch"}, "24_capstone")
