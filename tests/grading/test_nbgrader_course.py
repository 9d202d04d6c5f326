"""An nbgrader course graded by edu-dl as nbgrader 0.9 grades it, cell by cell; scope, dates,
roster, and the batches that must not end in success
(edu_dl/grading/nbgrader_course.py: the fixtures)."""

from __future__ import annotations

import csv
import json
import os
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import nbformat
import pytest
from fixtures import graded_course as batches
from fixtures import nbgrader_course as course

from edu_dl.cli import main
from edu_dl.grading import model, nbgrader
from edu_dl.grading import notebooks as nbs
from edu_dl.grading.settings import Settings
from edu_dl.grading.term import policy
from edu_dl.grading.term.assign import assign, lint
from edu_dl.grading.trust import files

FAST = Settings(timeout_s=30, memory_mb=2048)


def csv_rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


# --------------------------------------------------------------------------- determine_grade


def _test_cell(*outputs: nbformat.NotebookNode, points: float = 2) -> nbformat.NotebookNode:
    cell = nbformat.v4.new_code_cell("x", metadata={"nbgrader": {
        "grade": True, "solution": False, "locked": True, "grade_id": "t", "points": points}})
    cell.outputs = list(outputs)
    return cell


def _result(text: str) -> nbformat.NotebookNode:
    return nbformat.v4.new_output("execute_result", data={"text/plain": text}, execution_count=1)


def test_determine_grade_follows_nbgrader_rule_for_rule() -> None:
    stream = nbformat.v4.new_output
    assert nbgrader.determine_grade(_test_cell(), 2, None) == 2  # nothing: full credit
    assert nbgrader.determine_grade(_test_cell(stream("stream", name="stdout", text="hi")), 2,
                                 None) == 2
    assert nbgrader.determine_grade(_test_cell(stream("stream", name="stderr", text="w")), 2,
                                 None) == 0
    assert nbgrader.determine_grade(_test_cell(stream("error", ename="E", evalue="", traceback=[])),
                                 2, None) == 0
    assert nbgrader.determine_grade(_test_cell(_result("0.5")), 2, None) == 0.5
    # the first decisive output wins: a result before a warning is partial credit
    assert nbgrader.determine_grade(_test_cell(_result("1.5"), stream("stream", name="stderr",
                                                                   text="w")), 2, None) == 1.5
    assert nbgrader.determine_grade(_test_cell(_result("'text'")), 2, None) == 2  # not a number
    assert nbgrader.determine_grade(_test_cell(_result("-1")), 2, None) == 2  # negative: full
    assert nbgrader.determine_grade(_test_cell(_result("nan")), 2, None) == 2
    with pytest.raises(nbgrader.PartialCreditError):
        nbgrader.determine_grade(_test_cell(_result("3")), 2, None)  # nbgrader raises too
    released = course.released()
    answer = next(c for c in released.cells if nbgrader.grade_id(c) == "explain")
    checksum = answer.metadata.nbgrader["checksum"]
    assert nbgrader.determine_grade(answer, 2, checksum) == 0  # untouched
    answer.source += "\n# my answer"
    assert nbgrader.determine_grade(answer, 2, checksum) is None  # a person grades it


def test_assign_takes_an_nbgrader_assignment_as_it_is(tmp_path: Path) -> None:
    src, _ = course.build(tmp_path)
    assert lint(course.source()) == []
    assign(src, tmp_path / "release")
    ours = nbs.read_notebook(tmp_path / "release" / f"{course.NOTEBOOK}.ipynb")
    assert [c.source for c in ours.cells] == [c.source for c in course.released().cells]
    double = next(c for c in ours.cells if nbgrader.grade_id(c) == "double")
    assert double.source == nbgrader.CODE_STUB  # a solution cell without markers: replaced whole


# --------------------------------------------------------------------------- end to end


def edu_dl_scores(out: Path) -> dict[str, dict[str, float | None]]:
    scores: dict[str, dict[str, float | None]] = {}
    for row in csv_rows(out / "grades.csv"):
        auto = None if row["status"] == "needs manual grading" else float(row["points"])
        scores.setdefault(row["student"], {})[row["part"]] = auto
    return scores


@pytest.mark.slow
def test_an_nbgrader_course_is_graded_cell_by_cell_as_nbgrader_does(
        graded_nbgrader_course: batches.Graded) -> None:
    """The course graded once per session by conftest.py (what `edu-dl grade --jobs 2 --timeout
    30 --memory 2048` runs; test_instructor_course's manual-sheet test runs that command on
    this course), read here without a change."""
    src, root = graded_nbgrader_course.source, graded_nbgrader_course.submissions
    out = graded_nbgrader_course.out
    scores = edu_dl_scores(out)
    for student, expected in course.EXPECTED.items():
        got = {k: v for k, v in scores[student].items() if k in expected}
        assert got == expected, student
        assert scores[student]["plot_task"] is None  # a task: always a person's
    rows = csv_rows(out / "grades.csv")
    judged = {r["part"]: r["judged"] for r in rows}
    assert judged["test_squares"] == model.INSIDE and judged["why"] == model.BY_HAND
    edited = next(r for r in rows if (r["student"], r["part"]) == ("carol", "test_squares"))
    assert "was edited; restored" in edited["message"]
    deleted = next(r for r in rows if (r["student"], r["part"]) == ("dave", "test_double"))
    assert "was missing; restored" in deleted["message"]
    export = {r["student_id"]: r for r in csv_rows(out / "nbgrader_grades.csv")}
    assert {s: (r["score"], r["max_score"]) for s, r in export.items()} == {
        "alice": ("7", "12"), "bob": ("2", "12"), "carol": ("3.5", "12"),
        "dave": ("3.5", "12")}
    assert {r["assignment"] for r in export.values()} == {course.ASSIGNMENT}
    executed = nbs.read_notebook(out / "autograded" / "bob" / course.ASSIGNMENT
                                 / f"{course.NOTEBOOK}.ipynb")
    assert any(o.get("name") == "stderr" for c in executed.cells if c.cell_type == "code"
               for o in c.get("outputs", []))  # saved executed, outputs included
    # What students read holds no hidden test: not its source, not a traceback quoting it
    # (carol's squares fails the visible assert, one line above the hidden region).
    assert "assert squares(1) == [1]" in (src / f"{course.NOTEBOOK}.ipynb").read_text()
    pages = [*(out / "feedback").rglob("*.*"), *(out / "feedback_html").iterdir(),
             *(root / "feedback").rglob("*.html")]  # the course's, for release_feedback
    assert len([p for p in pages if p.suffix == ".html"]) == 3 * len(course.STUDENTS)
    for page in pages:
        text = page.read_text()
        assert "HIDDEN TESTS" not in text and "squares(1)" not in text, page
    carol = (out / "feedback" / "carol" / course.ASSIGNMENT / f"{course.NOTEBOOK}.html"
             ).read_text()
    assert "AssertionError" in carol and "assert</span>" in carol
    assert "test_squares: 0 / 2</b> (failed)" in carol


SCORES = """
import json
from nbgrader.api import Gradebook
with Gradebook("sqlite:///gradebook.db") as gb:
    print(json.dumps({s.id: {g.name: g.auto_score for g in gb.find_submission_notebook(
        "{notebook}", "{assignment}", s.id).grades} for s in gb.students}))
"""


@pytest.mark.slow
def test_nbgrader_autograde_gives_the_same_points(request: pytest.FixtureRequest,
                                                 nbgrader_beside_edu_dl: tuple[dict, Path]
                                                 ) -> None:
    """nbgrader 0.9 itself (its own venv, as test_nbgrader_compat) on the same course: per cell
    the auto_score equals the fixture's expectation, which the edu-dl test above checks. The
    course nbgrader autograded is the grading benchmark's (conftest.py's
    nbgrader_beside_edu_dl, one autograde for both tests), read here without writing to it."""
    bin_dir = course.nbgrader_venv(Path(request.config.cache.mkdir("nbgrader-0.9-venv")))
    root = nbgrader_beside_edu_dl[1] / "round0" / "nbgrader"
    assert (root / "gradebook.db").is_file(), sorted(p.name for p in root.iterdir())
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "PYTHON"))}
    script = SCORES.replace("{notebook}", course.NOTEBOOK).replace("{assignment}",
                                                                  course.ASSIGNMENT)
    done = subprocess.run([str(bin_dir / "python"), "-c", script], cwd=root, env=env,
                          capture_output=True, text=True, timeout=120, check=True)
    theirs = json.loads(done.stdout)
    for student, expected in course.EXPECTED.items():
        assert {k: v for k, v in theirs[student].items() if k in expected} == expected, student


# --------------------------------------------------------------------------- nothing to grade


def test_nothing_to_grade_exits_non_zero_with_one_sentence(tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]
                                                           ) -> None:
    src, root = course.build(tmp_path / "course")
    out = tmp_path / "grades"

    def grade(submissions: Path, source: Path, *extra: str) -> str:
        assert main(["grade", str(submissions), "--source", str(source), "--out", str(out),
                     *extra]) == 2
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0, err
        return err

    plain = tmp_path / "plain"
    plain.mkdir()
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("1")]),
                   plain / "notes.ipynb")
    assert "has a graded cell" in grade(root, plain)
    assert "no such folder or notebook" in grade(root, tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    assert "no source notebooks" in grade(root, tmp_path / "empty")
    loose = tmp_path / "loose"
    loose.mkdir()
    nbformat.write(course.submission("alice"), loose / f"{course.NOTEBOOK}.ipynb")
    assert "no student folders here (only 1 notebook(s) at the top level)" in grade(loose, src)
    wrong_names = tmp_path / "wrong_names"
    (wrong_names / "alice").mkdir(parents=True)
    nbformat.write(course.submission("alice"), wrong_names / "alice" / "other.ipynb")
    assert "holds a notebook named like a source notebook" in grade(wrong_names, src)
    assert "--exercise nope: no such source notebook" in grade(root, src, "--exercise", "nope")
    assert not (out / "grades.csv").exists()  # nothing written


# --------------------------------------------------------------------------- scope, dates, roster


def test_late_policy_and_timestamps() -> None:
    due = files.parse_time("2026-03-01T12:00")
    assert files.parse_time("2026-03-01 13:30:00.123456 UTC") > due
    assert files.parse_time("2026-03-01T13:00+01:00") == due
    per_hour = policy.LatePolicy.parse("per-hour:0.5")
    assert per_hour.penalty(5, 1) == 0.5 and per_hour.penalty(5, 3601) == 1.0
    assert per_hour.penalty(0.7, 10 * 3600) == 0.7  # never more than the score
    assert policy.LatePolicy.parse("zero").penalty(5, 1) == 5
    assert policy.LatePolicy.parse("none").penalty(5, 10**6) == 0
    with pytest.raises(policy.PolicyError):
        policy.LatePolicy.parse("per-hour:x")


def test_timestamp_is_read_bounded_and_never_through_a_link(tmp_path: Path) -> None:
    (tmp_path / "ok").mkdir()
    (tmp_path / "ok" / "timestamp.txt").write_text("2026-03-01 12:00:00.000000 UTC\n")
    assert files.read_timestamp(tmp_path / "ok") == datetime(2026, 3, 1, 12,
                                                              tzinfo=UTC)
    (tmp_path / "link").mkdir()
    (tmp_path / "link" / "timestamp.txt").symlink_to(tmp_path / "ok" / "timestamp.txt")
    assert files.read_timestamp(tmp_path / "link") is None
    (tmp_path / "fifo").mkdir()
    os.mkfifo(tmp_path / "fifo" / "timestamp.txt")
    assert files.read_timestamp(tmp_path / "fifo") is None
    (tmp_path / "big").mkdir()
    (tmp_path / "big" / "timestamp.txt").write_text("2026-03-01" + " " * 10**6)
    assert files.read_timestamp(tmp_path / "big") is None


@pytest.mark.slow
def test_only_what_is_due_with_late_penalties_and_a_roster(tmp_path: Path) -> None:
    src, root = course.build(tmp_path / "course")
    # A second source notebook nobody submitted: not due, so nobody is "missing" it.
    other = course.source()
    nbformat.write(other, src / "problem2.ipynb")
    (root / "submitted" / "alice" / course.ASSIGNMENT / "timestamp.txt").write_text(
        "2026-03-01 14:30:00.000000 UTC")  # 2.5 h late: 3 started hours
    (root / "submitted" / "bob" / course.ASSIGNMENT / "timestamp.txt").write_text(
        "2026-03-01 11:00:00 UTC")  # on time
    roster = tmp_path / "roster.csv"
    roster.write_text("id,first_name,last_name,email\nalice,Alice,Liddell,a@x.org\n"
                      "=cmd,Eve,Formula,e@x.org\n")
    out = tmp_path / "grades"
    assert main(["grade", str(root), "--source", str(src), "--out", str(out), "--jobs", "2",
                 "--due", "2026-03-01T12:00", "--late", "per-hour:1", "--roster", str(roster),
                 "--timeout", "30"]) == 0
    rows = csv_rows(out / "grades.csv")
    assert {r["exercise"] for r in rows} == {course.NOTEBOOK}
    late = [r for r in rows if r["part"] == policy.LATE]
    assert [(r["student"], float(r["points"])) for r in late] == [("alice", -3.0)]
    missing = {r["status"] for r in rows if r["student"] == "'=cmd"}
    assert missing == {"missing"}  # on the roster, submitted nothing; formula neutralised
    export = {r["student_id"]: r for r in csv_rows(out / "nbgrader_grades.csv")}
    alice = export["alice"]
    assert (alice["raw_score"], alice["late_submission_penalty"], alice["score"]) == \
        ("7", "3", "4")
    assert (alice["first_name"], alice["last_name"], alice["email"]) == \
        ("Alice", "Liddell", "a@x.org")
    assert alice["timestamp"] == "2026-03-01 14:30:00 UTC"
    assert alice["duedate"] == "2026-03-01 12:00:00 UTC"
    assert export["bob"]["late_submission_penalty"] == "0.0"
