"""Partial credit per case (``Part(partial=True)``), the failed cases in the gradebook, and
hidden cases whose failure messages show shapes and counts but never a value."""

from __future__ import annotations

import csv
import os
import random
import re
from decimal import Decimal
from pathlib import Path
from typing import Any

import nbformat
import numpy as np
import pytest
from fixtures.nbgrader_course import _code

from edu_dl.grading import sandbox
from edu_dl.grading.authoring.spec import Part, Verdict, describe_case, judge_case
from edu_dl.grading.authoring.withhold import withheld, withheld_error
from edu_dl.grading.protocol import ErrorText, roundtrip
from edu_dl.grading.settings import Settings
from edu_dl.grading.stages.judge import case_numbers, case_points, judge_part
from edu_dl.grading.term import batch as G

SECRET = 12345.678  # a hidden input: it must appear nowhere the student reads
SECRET_TEXTS = ("12345", "24691", "37037")  # the input, 2x (expected) and 3x (got), any format
SHOWN = 777.25  # a visible input: its failure still shows values


def _double_part(points: float, partial: bool, n_hidden: int = 2, **kw: Any) -> Part:
    """Visible: one case; hidden: ``n_hidden`` cases, the last holding SECRET."""
    def cases(rng: Any, hidden: bool) -> list[tuple[Any, ...]]:
        if not hidden:
            return [(np.array([1.0, 2.0]),)]
        return [(np.array([3.0, float(k)]),) for k in range(n_hidden - 1)] + \
            [(np.array([SECRET, SECRET]),)]
    return Part(id="t.double", points=points, cases=cases, expected=lambda x: x * 2,
                arg_names=("x",), partial=partial, **kw)


def _draw(part: Part) -> tuple[list[tuple[Any, ...]], int]:
    rng = np.random.default_rng(0)
    visible = part.cases(rng, False)
    return roundtrip([*visible, *part.cases(rng, True)]), len(visible)


def _wrong_on_large(x: Any) -> Any:
    return x * 2 if np.max(np.abs(x)) < 100 else x * 3


# --------------------------------------------------------------------------- points


@pytest.mark.parametrize(("points", "n", "shares"), [
    (5, 3, ["1.67", "1.67", "1.66"]), (1, 4, ["0.25"] * 4), (1, 8, ["0.125"] * 8),
    (2, 7, ["0.29"] * 4 + ["0.28"] * 3), (0.01, 3, ["0.004", "0.003", "0.003"]),
    (3, 1, ["3.00"])])
def test_case_points_are_exact_decimals_that_sum_to_the_part(points: float, n: int,
                                                            shares: list[str]) -> None:
    got = case_points(points, n)
    assert got == [Decimal(s) for s in shares]
    assert sum(got) == Decimal(repr(float(points)))


def test_case_points_always_sum_to_the_points() -> None:
    rnd = random.Random(5)
    for _ in range(500):
        points = rnd.choice([rnd.randint(0, 20), rnd.randint(0, 2000) / 100,
                             rnd.randint(1, 80) / 8])
        n = rnd.randint(1, 40)
        shares = case_points(points, n)
        assert len(shares) == n and sum(shares) == Decimal(repr(float(points))), (points, n)
        assert max(shares) - min(shares) <= Decimal(1).scaleb(shares[0].as_tuple().exponent)


def test_one_failed_hidden_case_of_n_costs_its_share_only_with_partial() -> None:
    for n_hidden in (2, 4):
        for partial in (True, False):
            part = _double_part(points=n_hidden + 1, partial=partial, n_hidden=n_hidden)
            cases, visible = _draw(part)
            n = len(cases)
            got = [_wrong_on_large(*args) for args in cases]  # only the last case is wrong
            judged = judge_part(part, cases, got, visible=visible)
            assert judged.failed == f"{n} of {n}"
            if partial:
                assert (judged.status, judged.points) == ("partial", float(n - 1)), judged
            else:
                assert (judged.status, judged.points) == ("failed", 0.0), judged
            assert judged.message.startswith(f"{n - 1} of {n} cases passed; failed: {n}")


def test_five_points_over_three_cases_are_exact() -> None:
    part = _double_part(points=5, partial=True)
    cases, visible = _draw(part)
    got = [_wrong_on_large(*args) for args in cases]
    judged = judge_part(part, cases, got, visible=visible)
    assert judged.points == 3.34 and repr(judged.points) == "3.34"  # 1.67 + 1.67
    got[0] = got[0] + 1  # the first case wrong too: only the second's share is left
    assert judge_part(part, cases, got, visible=visible).points == 1.67
    assert judge_part(part, cases, [a[0] * 2 for a in cases], visible=visible).points == 5.0


def test_an_error_costs_its_case_and_a_source_check_the_whole_part() -> None:
    part = _double_part(points=3, partial=True,
                        source_check=lambda text: Verdict("@" in text, "it uses no @"))
    cases, visible = _draw(part)
    got: list[Any] = [a[0] * 2 for a in cases]
    got[1] = ErrorText("ValueError: boom\n  at line 2 in double: raise ValueError('boom')")
    judged = judge_part(part, cases, got, "x @ y", visible=visible)
    assert (judged.status, judged.points, judged.failed) == ("partial", 2.0, "2 of 3")
    assert "ValueError (its message is not shown" in judged.message
    judged = judge_part(part, cases, got, "x * 2", visible=visible)  # the source fails
    assert (judged.status, judged.points) == ("failed", 0.0)
    assert "it uses no @: the whole part scores 0" in judged.message
    judged = judge_part(part, cases, [a[0] * 2 for a in cases], "x * 2", visible=visible)
    assert (judged.status, judged.points) == ("failed", 0.0)
    assert judged.message.startswith("the values are right, but it uses no @")
    not_yet = [ErrorText("not implemented yet")] * len(cases)
    assert judge_part(part, cases, not_yet, "x @ y", visible=visible).status == "not implemented"


def test_case_numbers_shorten_runs() -> None:
    assert case_numbers([1, 4, 5, 6], 7) == "2, 5-7 of 7"
    assert case_numbers([0, 1], 3) == "1, 2 of 3"
    assert case_numbers([], 3) == ""


# --------------------------------------------------------------------------- hidden values


def test_a_hidden_failure_shows_shapes_counts_and_the_hint_never_a_value() -> None:
    hint = (lambda e, g, args: np.allclose(g, 1.5 * e), "a factor of 3/2: did you add x?")
    part = _double_part(points=1, partial=False, hints=(hint,))
    cases, visible = _draw(part)
    got = [_wrong_on_large(*args) for args in cases]
    message = judge_part(part, cases, got, visible=visible).message
    assert "hidden case 3 of 3 (x (2,)): 2 of 2 entries differ" in message
    assert "hint: a factor of 3/2" in message
    for secret in SECRET_TEXTS:
        assert secret not in message, message
    assert "error" not in message.split("\n", 1)[1]  # no max abs/rel error: derived from values
    # the same failure on a visible case shows values, as check() does
    full = judge_part(part, cases, got, visible=len(cases)).message
    assert "[0]: expected 24691.4 vs got 37037" in full, full


def test_a_hidden_scalar_argument_and_scalar_result_show_no_value() -> None:
    part = Part(id="t.scale", points=1, cases=lambda rng, hidden: [(np.float64(SECRET), 3)],
                expected=lambda a, k: a * k, arg_names=("a", "k"))
    args = part.cases(np.random.default_rng(0), True)[0]
    assert describe_case(part, 0, 1, args, hidden=True) == \
        "hidden case 1 of 1 (a (a number), k (a number))"
    assert "a=12345.7" in describe_case(part, 0, 1, args)
    verdict = judge_case(part, 0, 1, args, SECRET * 3, SECRET * 4, hidden=True)
    assert not verdict.ok and not any(s in verdict.message for s in ("12345", "37037", "49382"))


def test_withheld_keeps_only_what_holds_no_value() -> None:
    assert withheld("expected shape (3, 4), got shape (4, 3)") == \
        "expected shape (3, 4), got shape (4, 3)"
    assert withheld("output 1: expected number values (float64), got string (<U5)") == \
        "output 1: expected number values (float64), got string (<U5)"
    assert withheld("2 of 6 entries differ; got contains 1 inf/nan; max abs error 3.1, ...\n"
                    "  first differing entries: [0] expected 12345.7, got 5") == \
        "2 of 6 entries differ; got contains 1 inf/nan"
    for own in ("edge 12345 -> 3 comes before its input", "expected 12345.7, got 1",
                "could not compare the result (ValueError: 12345)",
                "expected shape (3,), got shape (3,) but 12345"):
        assert "12345" not in withheld(own)
    assert withheld_error("IndexError: index 12345 is out of bounds\n  at line 3 in f: x[12345]"
                          ) == "IndexError (its message is not shown for a hidden case), " \
                               "at line 3 in f"
    assert "12345" not in withheld_error("the call failed with 12345")


# --------------------------------------------------------------------------- end to end

PARTS = f'''
import numpy as np
from edu_dl.grading import Part

SECRET = {SECRET!r}


def hidden_cases(rng, hidden):
    if not hidden:
        return [(np.array([1.0, 2.0]),)]
    return [(np.array([3.0, 4.0]),), (np.array([SECRET, SECRET]),)]


PARTS = [
    Part(id="hw5.partial", points=5, cases=hidden_cases, expected=lambda x: x * 2,
         arg_names=("x",), partial=True),
    Part(id="hw5.whole", points=2, cases=hidden_cases, expected=lambda x: x * 2,
         arg_names=("x",)),
    Part(id="hw5.shown", points=1, expected=lambda x: x * 2, arg_names=("x",),
         cases=lambda rng, hidden: [] if hidden else [(np.array([{SHOWN!r}]),)]),
]
'''
STUDENT = ("import numpy as np\n\ndef double(x):\n"
           "    return x * 2 if np.max(np.abs(x)) < 100 else x * 3")


@pytest.mark.slow  # 2 s or more: make test-fast leaves it to make test
def test_the_gradebook_lists_failed_cases_and_shows_no_hidden_value(tmp_path: Path,
                                                                     monkeypatch: Any) -> None:
    monkeypatch.setenv(sandbox.GROUP_VAR, f"pytest{os.getpid()}-")
    src = tmp_path / "source" / "hw5"
    (src / "parts").mkdir(parents=True)
    (src / "parts" / "hw5.private.py").write_text(PARTS)
    nb = nbformat.v4.new_notebook()
    nb.cells = [_code("from edu_dl.grading import check", gid="setup", locked=True),
                _code("def double(x):\n    ### BEGIN SOLUTION\n    return x * 2\n"
                      "    ### END SOLUTION", gid="double", solution=True)]
    for name, points in (("partial", 5), ("whole", 2), ("shown", 1)):
        nb.cells.append(_code(f'check("hw5.{name}", double)\n### BEGIN HIDDEN TESTS\n'
                              f'check("hw5.{name}", double, hidden=True)\n'
                              "### END HIDDEN TESTS", gid=f"{name}_tests", grade=True,
                              locked=True, points=points))
    nbformat.write(nb, src / "hw5.ipynb")
    next(c for c in nb.cells if c.metadata["nbgrader"]["grade_id"] == "double").source = STUDENT
    student = tmp_path / "submitted" / "ann" / "hw5"
    student.mkdir(parents=True)
    nbformat.write(nb, student / "hw5.ipynb")
    out = tmp_path / "grades"
    G.grade(tmp_path / "submitted", src, out, settings=Settings(timeout_s=30, memory_mb=2048),
            progress=False, log=lambda s: None)
    with open(out / "grades.csv", newline="") as f:
        rows = {r["part"]: r for r in csv.DictReader(f)}
    got = {p: (rows[p]["points"], rows[p]["status"], rows[p]["failed_cases"])
           for p in ("hw5.partial", "hw5.whole", "hw5.shown")}
    assert got == {"hw5.partial": ("3.34", "partial", "3 of 3"),
                   "hw5.whole": ("0.0", "failed", "3 of 3"),
                   "hw5.shown": ("0.0", "failed", "1 of 1")}, rows
    assert "hidden case 3 of 3 (x (2,)): 2 of 2 entries differ" in rows["hw5.partial"]["message"]
    assert "failed: 3 (cases 2, 3 are hidden)" in rows["hw5.whole"]["message"]
    assert "expected 1554.5 vs got 2331.75" in rows["hw5.shown"]["message"]  # visible: values
    texts = {"grades.csv": (out / "grades.csv").read_text(),
             "nbgrader_grades.csv": (out / "nbgrader_grades.csv").read_text(),
             "feedback": (out / "feedback" / "ann.md").read_text(),
             "html": (out / "feedback_html" / "ann.html").read_text(),
             "page": "".join(p.read_text() for p in (out / "feedback" / "ann").rglob("*.html"))}
    for where, text in texts.items():
        assert "failed: 3 (cases 2, 3 are hidden)" in text or where == "nbgrader_grades.csv"
        # A page's SHA-256 digest (its edu-dl-page meta) is 64 random hex digits, which hold
        # "12345" about once in 20,000 pages (CI saw it): a hash, not a number shown.
        shown = re.sub(r"\b[0-9a-f]{64}\b", "<digest>", text)
        for secret in SECRET_TEXTS:
            assert secret not in shown, (where, secret)
    assert "3.34 / 5" in texts["feedback"] and "3.34 / 5" in texts["html"]
    assert "<b>hw5.partial: 3.34 / 5</b> (partial)" in texts["page"]
