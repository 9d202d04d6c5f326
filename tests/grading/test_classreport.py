"""``edu-dl report``: the class at a glance, counted in students, from a batch graded here."""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path

import nbformat
import pytest
from fixtures.nbgrader_course import _code

from edu_dl.grading import sandbox
from edu_dl.grading.authoring import spec
from edu_dl.grading.model import BY_HAND, Row
from edu_dl.grading.settings import Settings
from edu_dl.grading.term import batch as G
from edu_dl.grading.term import classreport, manual
from edu_dl.grading.term.classreport_show import after_batch, render, write_histogram
from edu_dl.grading.term.policy import LATE, Person
from edu_dl.grading.term.report import COLUMNS, write_outputs
from edu_dl.grading.trust.cells import cell_print, normalized_tokens

FAST = Settings(timeout_s=30, memory_mb=2048)

PRIVATE = '''
import numpy as np
from edu_dl.grading import Part
from edu_dl.grading.authoring.hints import Mistake, Transposed

PARTS = [
    Part(id="hw3.triple", points=2,
         cases=lambda rng, hidden: [(rng.standard_normal((2, 3)),)],
         expected=lambda x: 3 * x,
         hints=(Transposed("the result is transposed"),
                Mistake(lambda e, args: 2 * args[0], "multiplied by 2, not 3"))),
    Part(id="hw3.total", points=1,
         cases=lambda rng, hidden: [(rng.standard_normal(5),)],
         expected=lambda x: float(np.sum(x))),
]
'''
TRIPLE = ("def triple(x):\n    ### BEGIN SOLUTION\n    y = x + x + x\n    return y\n"
          "    ### END SOLUTION")
TOTAL = "def total(x):\n    ### BEGIN SOLUTION\n    return float(x.sum())\n    ### END SOLUTION"
ANN = ("def triple(x):\n    # three times: x * 3\n    y = x * 3\n\n    return y  # done\n")
BOB = ("def triple(x):\n  y = x*3   # copied?\n  return   y\n")  # ann's, respaced
CAT = "def triple(x):\n    factor = 2\n    return factor * x\n"
DAN = "def triple(x):\n    return x + x  # the usual slip\n"
EVE = "import os\nos._exit(3)\n"
GOOD_TOTAL = "def total(x):\n    return float(x.sum())\n"


def _source(folder: Path) -> None:
    (folder / "parts").mkdir(parents=True)
    (folder / "parts" / "hw3.private.py").write_text(PRIVATE)
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        _code("from edu_dl.grading import check", gid="setup", locked=True),
        _code(TRIPLE, gid="triple", solution=True),
        _code('check("hw3.triple", triple)', gid="triple_tests", grade=True, locked=True,
              points=2),
        _code(TOTAL, gid="total", solution=True),
        _code('check("hw3.total", total)', gid="total_tests", grade=True, locked=True,
              points=1),
    ]
    nbformat.write(nb, folder / "hw3.ipynb")


def _submit(source: Path, folder: Path, triple: str, total: str) -> None:
    nb = nbformat.read(source / "hw3.ipynb", as_version=4)
    nb.cells[1].source, nb.cells[3].source = triple, total
    folder.mkdir(parents=True)
    nbformat.write(nb, folder / "hw3.ipynb")


@pytest.fixture(autouse=True)
def _own_sandbox_group(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(sandbox.GROUP_VAR, f"pytest{os.getpid()}-")


def test_normalized_cells_ignore_comments_blank_lines_and_spacing() -> None:
    assert cell_print(ANN) == cell_print(BOB)
    assert cell_print(ANN) != cell_print(CAT)
    assert normalized_tokens("x = 1  # one\n\n\ny=2") == ["x", "=", "1", "\n", "y", "=", "2"]
    # indentation depth counts, its width does not; renaming a variable is another cell
    assert cell_print("if a:\n  b()\n") == cell_print("if a:\n        b()\n")
    assert cell_print("if a:\n  b()\nc()") != cell_print("if a:\n  b()\n  c()")
    assert cell_print(ANN.replace("y", "z")) != cell_print(ANN)
    # bounded: a huge cell is not compared; text the lexer refuses still gets a digest
    assert cell_print("x = 1\n" * 20_000) is None
    assert cell_print("!pip install torch\ndef f(:") is not None


def test_a_batch_reports_students_pass_rates_shared_cells_and_mistakes(
        tmp_path: Path) -> None:
    from edu_dl.cli import main

    source, subs, out = tmp_path / "source", tmp_path / "submitted", tmp_path / "grades"
    _source(source)
    for student, triple in (("ann", ANN), ("bob", BOB), ("cat", CAT), ("dan", DAN),
                            ("eve", EVE)):
        _submit(source, subs / student, triple, GOOD_TOTAL)
    roster = {s: Person() for s in ("ann", "bob", "cat", "dan", "eve", "fay")}
    summary = G.grade(subs, source, out, settings=FAST, progress=False, log=lambda s: None,
                      roster=roster)
    rows = {(r.student, r.part): r for r in summary.rows}
    assert rows[("cat", "hw3.triple")].hint == rows[("dan", "hw3.triple")].hint == "2:Mistake"
    assert rows[("ann", "hw3.triple")].hint == ""
    with open(out / "grades.csv", newline="") as f:
        assert {r["hint"] for r in csv.DictReader(f) if r["student"] == "cat"} == \
            {"2:Mistake", ""}

    report = classreport.build(out)
    # 12 rows, 6 students: fay's two "missing" rows are one missing student
    [count] = report.exercises
    assert (count.students, count.submitted, count.missing, count.late,
            count.crashed_or_timed_out) == (6, 5, 1, 0, 1)
    rates = {r.part: (r.passed, r.students) for r in report.parts}
    assert rates == {"hw3.triple": (2, 5), "hw3.total": (4, 5)}
    assert sorted(report.scores["hw3"]) == pytest.approx([0, 100 / 3, 100 / 3, 100, 100])
    # ann and bob differ only in comments and spacing; everyone wrote the solution's total
    # (listed, and marked as the source's own: short standard answers are alike by nature)
    assert sorted((s.exercise, s.cell, s.students, s.same_as_solution)
                  for s in report.shared_cells) == [
        ("hw3", "total", ["ann", "bob", "cat", "dan", "eve"], True),
        ("hw3", "triple", ["ann", "bob"], False)]
    [mistake] = report.misconceptions
    assert (mistake.part, mistake.hint, mistake.students, mistake.example, mistake.message) \
        == ("hw3.triple", "2:Mistake", 2, "cat", "multiplied by 2, not 3")

    # The command: text (default), Markdown and JSON; the histogram is a PNG beside grades.csv
    (out / classreport.HISTOGRAM).unlink(missing_ok=True)
    assert main(["report", str(out / "grades.csv"), "--format", "json"]) == 0
    assert (out / classreport.HISTOGRAM).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "6 students, 5 submitted, 1 missing" in render(report)
    assert "| hw3.triple | 2 / 5 | 40% |" in render(report, "markdown")
    data = json.loads(render(report, "json"))
    assert ["ann", "bob"] in [s["students"] for s in data["shared_cells"]]
    assert {p["part"]: p["pass_rate"] for p in data["parts"]} == {"hw3.triple": 0.4,
                                                                  "hw3.total": 0.8}
    short = after_batch(out)
    assert "fewest passed hw3.triple (40%)" in short and "(5 students)" in short


def _rows(student: str, statuses: tuple[str, str], **extra: str) -> list[Row]:
    return [Row(student, "hw9", part, 1.0 if status == "passed" else 0.0, 1.0, status, "m",
                **extra)  # type: ignore[arg-type]
            for part, status in zip(("hw9.a", "hw9.b"), statuses)]


def test_students_not_rows_late_and_hostile_names(tmp_path: Path) -> None:
    evil = "=cmd|' /C calc'!A0\x1b[2J\u202e"
    rows = [*_rows("ann", ("passed", "passed")), *_rows("bob", ("missing", "missing")),
            *_rows("cat", ("timeout", "timeout")), *_rows(evil, ("failed", "passed")),
            Row("ann", "hw9", LATE, -0.5, 0.0, "late", "2 hours late", "", "late policy"),
            Row("zed", "", "", 0.0, 0.0, "refused", "a link")]
    rows[6].hint = "1:Scalar"
    write_outputs(tmp_path, rows, [], log=lambda s: None)
    report = classreport.build(tmp_path)
    [count] = report.exercises
    assert (count.students, count.submitted, count.missing, count.late,
            count.crashed_or_timed_out) == (4, 3, 1, 1, 1)
    assert count.mean_score == pytest.approx((1.5 + 0 + 1) / 3)
    [mistake] = report.misconceptions
    assert mistake.students == 1 and mistake.hint == "1:Scalar"
    text = render(report)
    assert "\x1b" not in text and "\u202e" not in text
    markdown = render(report, "markdown")
    assert "\x1b" not in markdown and "=cmd\\|" in markdown and "=cmd|" not in markdown
    assert "no class.json" in text  # graded without it: says so, still reports


def test_a_gradebook_from_before_the_hint_column_still_reports(tmp_path: Path) -> None:
    old = [c for c in COLUMNS if c != "hint"]
    with open(tmp_path / "grades.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(old)
        writer.writerow(["ann", "hw9", "hw9.a", 1, 1, "passed", "", "bwrap", "x", ""])
    report = classreport.build(tmp_path / "grades.csv")
    assert report.exercises[0].submitted == 1 and not report.misconceptions
    assert any("no hint column" in n for n in report.notes)
    (tmp_path / "other.csv").write_text("a,b\n1,2\n")
    with pytest.raises(classreport.ReportError, match="not a gradebook"):
        classreport.build(tmp_path / "other.csv")


def test_recorded_cells_are_bounded_and_a_broken_submission_costs_only_its_own(
        tmp_path: Path) -> None:
    from edu_dl.grading.model import Job
    from edu_dl.grading.stages.load import load_parts, load_source

    _source(tmp_path / "source")
    exercises = load_source(tmp_path / "source", log=lambda s: None)
    load_parts(exercises, tmp_path / "source")
    exercise = exercises["hw3"]
    evil = "\x1b[2Jevil\udcff"
    jobs = []
    for student, triple in (("ann", ANN), (evil, BOB), ("huge", "x = 1\n" * 30_000),
                            ("stub", "def triple(x):\n    # YOUR CODE HERE\n"
                                     "    raise NotImplementedError()")):
        _submit(tmp_path / "source", tmp_path / "subs" / student, triple, GOOD_TOTAL)
        jobs.append(Job(student, exercise, tmp_path / "subs" / student / "hw3.ipynb", "hw3"))
    (tmp_path / "subs" / "broken").mkdir()
    (tmp_path / "subs" / "broken" / "hw3.ipynb").write_text("[" * 10_000)
    jobs.append(Job("broken", exercise, tmp_path / "subs" / "broken" / "hw3.ipynb", "hw3"))
    classreport.record_class(tmp_path, jobs, FAST, log=print)
    data = classreport.read_class_data(tmp_path / classreport.CLASS_DATA)
    recorded = {(c[0], c[2]) for c in data["cells"]}
    assert ("ann", "triple") in recorded and (evil, "triple") in recorded
    assert ("huge", "triple") not in recorded and ("stub", "triple") not in recorded
    assert not any(c[0] == "broken" for c in data["cells"])
    assert data["hints"]["hw3"]["hw3.triple"] == {"1:Transposed": "the result is transposed",
                                                  "2:Mistake": "multiplied by 2, not 3",
                                                  "generic": classreport.GENERIC_MESSAGE,
                                                  **spec.GUARD_HINTS}  # the one guard's two
    text = (tmp_path / classreport.CLASS_DATA).read_bytes()
    assert text.isascii() and b"x = 1" not in text  # digests only, no student text
    [shared, _] = sorted(classreport.shared_cells(data["cells"]), key=lambda s: s.cell,
                         reverse=True)
    assert shared.students == sorted(["ann", evil])
    shown = render(classreport.ClassReport(shared_cells=[shared]))
    assert "\x1b" not in shown and "\\x1b[2Jevil\\xff" in shown
    # an exercise name that looks like TeX is drawn as text
    report = classreport.ClassReport(scores={"hw$\\frac{": [10.0, 100.0]})
    assert write_histogram(report, tmp_path / "h.png") == tmp_path / "h.png"


HAND = "sgd_step_justification"


def _hand_graded_term(tmp_path: Path, hand: dict[str, float]) -> list[Row]:
    """Eight students of hw5: an autograded part (six passed) and a cell a person grades,
    given ``hand`` (student -> points of 2) through a filled-in manual.csv as an instructor
    would; the others still wait for a person."""
    students = [f"s{i}" for i in range(8)]
    rows = []
    for i, student in enumerate(students):
        passed = i < 6
        rows += [Row(student, "hw5", "hw5.sgd", 1.0 if passed else 0.0, 1.0,
                     "passed" if passed else "failed", "m"),
                 Row(student, "hw5", HAND, 0.0, 2.0, manual.NEEDS, "an answer: graded by hand",
                     judged=BY_HAND, answer=f"because {student}")]
    filled = {(s, "hw5", HAND): (p, "", manual.answer_id(f"because {s}"))
              for s, p in hand.items()}
    assert manual.merge(rows, filled, tmp_path / "sheet.csv") == len(hand)
    write_outputs(tmp_path, rows, [], log=lambda s: None)
    return rows


def test_a_part_graded_by_hand_counts_its_points_and_waiting_rows_are_no_failures(
        tmp_path: Path) -> None:
    _hand_graded_term(tmp_path, {"s0": 2.0, "s1": 2.0, "s2": 2.0})
    report = classreport.build(tmp_path)
    rate = {r.part: r for r in report.parts}[HAND]
    assert (rate.students, rate.by_hand, rate.waiting) == (8, 3, 5)
    assert rate.pass_rate == 1.0 and rate.mean_points == 2.0  # of the three graded
    text = render(report)
    [line] = [line for line in text.splitlines() if HAND in line]
    assert "100%" in line and "3 of 8 graded by hand so far" in line
    assert "0/8" not in line and "0%" not in line.replace("100%", "")
    assert "5 students with answers still to grade by hand" in text
    assert "1.50 / 3 (5 students with answers still to grade by hand" in render(report, "markdown")
    markdown = render(report, "markdown")
    assert f"| {HAND} | 3 of 8 graded by hand so far | 100% | 2.00 / 2 |" in markdown
    data = {p["part"]: p for p in json.loads(render(report, "json"))["parts"]}
    assert (data[HAND]["pass_rate"], data[HAND]["waiting"], data[HAND]["by_hand"]) == (1, 5, 3)
    # the batch's summary names the autograded part six of eight passed, not the hand one
    short = after_batch(tmp_path)
    assert "fewest passed hw5.sgd (75%)" in short and HAND not in short


def test_hand_grades_count_their_share_and_a_part_nobody_graded_yet_is_waiting(
        tmp_path: Path) -> None:
    _hand_graded_term(tmp_path, {"s0": 1.0, "s1": 0.0})
    rate = {r.part: r for r in classreport.build(tmp_path).parts}[HAND]
    assert rate.pass_rate == pytest.approx(0.25) and rate.mean_points == 0.5  # 1/2 and 0/2
    short = after_batch(tmp_path)  # judged by its points, like the report: the fewest now
    assert f"fewest passed {HAND} (25% of its points, graded by hand)" in short

    waiting = tmp_path / "waiting"
    _hand_graded_term(waiting, {})
    report = classreport.build(waiting)
    rate = {r.part: r for r in report.parts}[HAND]
    assert (rate.by_hand, rate.waiting) == (0, 8)
    [line] = [line for line in render(report).splitlines() if HAND in line]
    assert "waiting" in line and "0 of 8 graded by hand so far" in line and "%" not in line
    assert {p["part"]: p["pass_rate"] for p in json.loads(render(report, "json"))["parts"]
            }[HAND] is None
    assert "fewest passed hw5.sgd (75%)" in after_batch(waiting)


def test_an_overridden_row_counts_the_points_a_person_gave(tmp_path: Path) -> None:
    rows = [*_rows("ann", ("failed", "passed")), *_rows("bob", ("passed", "passed"))]
    manual.override(rows[0], 1.0, "the grader's tolerance was too tight", tmp_path / "s.csv")
    write_outputs(tmp_path, rows, [], log=lambda s: None)
    rate = {r.part: r for r in classreport.build(tmp_path).parts}["hw9.a"]
    assert (rate.passed, rate.by_hand, rate.waiting, rate.pass_rate) == (1, 1, 0, 1.0)
