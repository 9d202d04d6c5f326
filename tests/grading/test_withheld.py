"""A case's withheld values (edu_dl.grading.Withheld): what a part judges against but a student
must never see, such as the labels of a held-out set. The oracle gets them; the student's
function, the sandbox's inputs, a release and every message get the case without them.
The sandboxed run: tests/grading/test_instructor_course.py. And Accuracy, the compare that judges
a classifier's labels against them by the share that is right."""

from __future__ import annotations

import io
from pathlib import Path

import nbformat
import numpy as np
import pytest

from edu_dl.grading import Accuracy, CheckFailed, Part, Withheld, protocol
from edu_dl.grading.authoring import release
from edu_dl.grading.authoring.spec import given, judged_cases, oracle, rejoin
from edu_dl.grading.model import Exercise, Job
from edu_dl.grading.settings import Settings
from edu_dl.grading.stages import judge, prepare
from edu_dl.grading.stages.secret import Secret


def signs_cases(rng: np.random.Generator, hidden: bool) -> list[tuple[object, ...]]:
    x = rng.standard_normal(9 if hidden else 6)
    return [(x, Withheld((x > 0).astype(np.int64)))]


PART = Part(id="hw5.signs", points=2, cases=signs_cases, expected=lambda x, labels: labels,
            arg_names=("x",))


def right(x: np.ndarray) -> np.ndarray:
    return (x > 0).astype(np.int64)


def test_given_oracle_and_rejoin() -> None:
    case = (1, Withheld("y"), 3.0)
    assert given(case) == (1, 3.0)
    assert oracle(Part(id="a.b", points=1, cases=lambda r, h: [],
                       expected=lambda a, y, b: (a, y, b)), case) == (1, "y", 3.0)
    assert rejoin((2, 4.0), case) == (2, Withheld("y"), 4.0)
    with pytest.raises(ValueError, match="rejoin: 1 given values for a case that gives 2"):
        rejoin((2,), case)


def test_check_and_the_release_see_the_case_without_its_withheld_values() -> None:
    drawn = release.visible_cases(PART)
    ((args, expected),) = drawn
    assert len(args) == 1 and not any(isinstance(a, Withheld) for a in args)
    assert np.array_equal(expected, right(args[0]))  # the oracle had the labels
    assert release.visible_cases(PART, hidden=True)[0][0][0].shape == (9,)


def test_a_wrong_answer_fails_without_showing_a_hidden_label(monkeypatch) -> None:
    from edu_dl.grading import checking

    monkeypatch.setattr(checking, "_get", lambda part_id: PART)
    assert checking.check("hw5.signs", right)
    with pytest.raises(CheckFailed) as failed:
        checking.check("hw5.signs", lambda x: np.ones_like(x, dtype=np.int64))
    assert "x (6,)" in str(failed.value)  # the case is described by what the function got
    verdict = judge.judge_part(PART, judged_cases(signs_cases(
        np.random.default_rng(1), True)), [np.ones(9, np.int64)], visible=0)
    assert verdict.status == "failed" and "hidden" in verdict.message
    assert "labels" not in verdict.message and "Withheld" not in verdict.message


def test_the_sandbox_gets_each_case_without_its_withheld_values(tmp_path: Path) -> None:
    """prepare() writes the sandbox's inputs: the labels are not among them, while the judge's
    copy of each case keeps them (and its given values exactly as they went in)."""
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("pass")]
    exercise = Exercise("hw5", nb, "0" * 64, parts=[("hw5.signs", "signs_tests")],
                        specs={"hw5.signs": PART})
    submitted = tmp_path / "ann" / "hw5.ipynb"
    submitted.parent.mkdir()
    nbformat.write(nb, submitted)
    found = prepare.prepare(Job("ann", exercise, submitted, "hw5"), tmp_path / "out",
                            Settings(), None, Secret(b"k" * 32), boxed=True)
    assert isinstance(found, prepare.Prepared)
    inputs = found.files[protocol.inputs_path(f"{found.root}/grading", "hw5.signs")]
    with np.load(io.BytesIO(inputs)) as arrays:  # as the sandbox reads its inputs
        sent = protocol.decode_cases(arrays)
    assert [len(case) for case in sent] == [1, 1]  # x alone, visible and hidden
    judged = found.cases["hw5.signs"]
    assert [type(case[1]) for case in judged] == [Withheld, Withheld]
    for case, went in zip(judged, sent):
        assert np.array_equal(case[0], went[0])
        assert np.array_equal(case[1].value, right(went[0]))


def test_a_release_freezes_the_visible_case_without_its_withheld_values(tmp_path: Path) -> None:
    archive, _, _ = release.freeze([PART], "hw5")
    path = tmp_path / "hw5.npz"
    path.write_bytes(archive)
    (frozen,) = release.load(path, public=lambda: None)  # type: ignore[arg-type,return-value]
    ((x,),) = frozen.cases(np.random.default_rng(0), False)
    assert np.array_equal(frozen.expected(x), right(x))  # its expected result, by value
    assert frozen.cases(np.random.default_rng(0), True) == []  # and no hidden case at all
    with np.load(path) as arrays:
        assert not any("Withheld" in str(arrays[name]) for name in arrays.files)


def test_accuracy_passes_at_its_share_and_says_how_far_off_it_is() -> None:
    truth = np.arange(100) % 10
    guess = truth.copy()
    guess[:30] = (guess[:30] + 1) % 10  # 70 of 100 right
    assert Accuracy(0.7)(truth, guess)  # exactly at the share
    # 7 of 100 right, at 0.07: 0.07 * 100 is 7.000000000000001 in floats, and 7 is enough
    assert Accuracy(0.07)(truth, np.where(np.arange(100) < 7, truth, -1))
    verdict = Accuracy(0.75)(truth, guess)
    assert not verdict and verdict.message == (
        "accuracy 0.700 (70 of 100 right), under the 0.75 this part asks for (75 right)")
    assert Accuracy(0.5)(truth, guess.astype(np.float64))  # whole floats are labels too


@pytest.mark.parametrize(("got", "says"), [
    (np.zeros((100, 10)), "one label per row, the class with the highest score"),
    (np.zeros(99, np.int64), "expected 100 labels (shape (100,)), got shape (99,)"),
    (np.full(100, 0.5), "whole-number labels"),
    (np.full(100, np.nan), "whole-number labels"),
])
def test_accuracy_says_what_is_wrong_with_what_came(got: np.ndarray, says: str) -> None:
    verdict = Accuracy(0.5)(np.arange(100) % 10, got)
    assert not verdict and says in verdict.message, verdict.message


def test_accuracy_is_a_share() -> None:
    for wrong in (0.0, 1.5, -0.1):
        with pytest.raises(ValueError, match=r"Accuracy\(at_least="):
            Accuracy(wrong)


def test_a_release_carries_accuracy_as_data(tmp_path: Path) -> None:
    part = Part(id="hw5.signs", points=2, cases=signs_cases, expected=lambda x, labels: labels,
                compare=Accuracy(0.8))
    archive, _, _ = release.freeze([part], "hw5")
    path = tmp_path / "hw5.npz"
    path.write_bytes(archive)
    (frozen,) = release.load(path, public=lambda: None)  # type: ignore[arg-type,return-value]
    assert frozen.compare == Accuracy(0.8)
