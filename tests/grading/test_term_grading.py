"""A term of grading (issue 24): one student at a time merged into the gradebooks, ``--student``,
per-student extensions, overrides of autograded rows, and late policies with grace and cap."""

from __future__ import annotations

import csv
import json
import shutil
from datetime import UTC, datetime
from pathlib import Path

import pytest
from fixtures.hostile import corpus

from edu_dl.cli import main
from edu_dl.grading.model import BY_HAND, OUTSIDE, Exercise, Job, Row
from edu_dl.grading.term import batch as G
from edu_dl.grading.term import db, gradebook, manual, report
from edu_dl.grading.term.policy import Dates, LatePolicy, PolicyError, read_extensions

EX = corpus.EXERCISE
STUDENTS = ("good", "stub", "wrong")
DUE = "2026-03-01T12:00"
DAY = 86400
CLI_SETTINGS = G.Settings(timeout_s=15.0, memory_mb=2048)  # what _argv's flags choose


def csv_rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def by_part(out: Path) -> dict[tuple[str, str], dict[str, str]]:
    return {(r["student"], r["part"]): r for r in csv_rows(out / "grades.csv")}


def of(out: Path, student: str) -> list[dict[str, str]]:
    return [r for r in csv_rows(out / "grades.csv") if r["student"] == student]


def pages(out: Path, student: str) -> dict[str, tuple[bytes, int]]:
    """A student's feedback files: bytes and modification time (untouched: both the same)."""
    return {p.name: (p.read_bytes(), p.stat().st_mtime_ns)
            for p in (out / "feedback" / f"{student}.md",
                      out / "feedback_html" / f"{student}.html")}


# --------------------------------------------------------------------------- late policies


def test_per_day_percentages_grace_and_cap() -> None:
    per_day = LatePolicy.parse("per-day:10%")
    assert per_day.penalty(8, 1, 10) == 1.0  # a started day: 10 % of the exercise's 10 points
    assert per_day.penalty(8, DAY, 10) == 1.0 and per_day.penalty(8, DAY + 1, 10) == 2.0
    assert per_day.penalty(0.5, 5 * DAY, 10) == 0.5  # never more than the score
    assert LatePolicy.parse("per-hour:10%").penalty(2, 2 * 3600 + 1, 2) == 0.6  # 3 h x 0.2
    graced = LatePolicy.parse("per-day:10%", grace="15m")
    assert graced.penalty(8, 15 * 60, 10) == 0.0
    assert graced.penalty(8, 15 * 60 + 1, 10) == 1.0  # late by its whole delay
    capped = LatePolicy.parse("per-day:10%", grace="2h", cap="25%")
    assert capped.penalty(10, 9 * DAY, 10) == 2.5
    assert str(capped) == "per-day:10%, grace 2 h 0 min, at most 25%"
    assert LatePolicy.parse("per-hour:0.5", cap="1").penalty(5, 10 * 3600) == 1.0  # points
    zero = LatePolicy.parse("zero", grace="1h")
    assert zero.penalty(5, 3600) == 0.0 and zero.penalty(5, 3601) == 5.0
    assert LatePolicy.parse("zero", cap="40%").penalty(5, 1, 5) == 2.0
    assert LatePolicy.parse("per-hour:1").penalty(5, 3601) == 2.0  # nbgrader's subtract, as was


@pytest.mark.parametrize(("late", "grace", "cap", "flag"), [
    ("per-week:1", None, None, "--late 'per-week:1'"),
    ("per-day:ten", None, None, "--late per-day: 'ten'"),
    ("per-day:150%", None, None, "--late per-day: '150%'"),
    ("per-day:-1", None, None, "--late per-day: '-1'"),
    ("none", "15 minutes", None, "--grace '15 minutes'"),
    ("none", None, "lots", "--late-cap 'lots'"),
])
def test_a_policy_that_cannot_be_read_names_its_flag(late: str, grace: str | None,
                                                     cap: str | None, flag: str) -> None:
    with pytest.raises(PolicyError) as caught:
        LatePolicy.parse(late, grace, cap)
    assert str(caught.value).startswith(flag), caught.value


def test_the_command_line_refuses_a_policy_before_grading(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["grade", str(tmp_path / "subs"), "--source", str(tmp_path / "src"),
            "--out", str(tmp_path / "out"), "--due", DUE]
    assert main([*args, "--late", "per-day:10%", "--late-cap", "half"]) == 2
    assert "--late-cap 'half'" in capsys.readouterr().err
    extensions = tmp_path / "ext.csv"
    extensions.write_text("student,due\nalice,next week\n")
    assert main([*args, "--extensions", str(extensions)]) == 2
    assert f"--extensions {extensions}, line 2: due 'next week'" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


# --------------------------------------------------------------------------- extensions


def test_extensions_are_read_strictly_and_the_most_specific_applies(tmp_path: Path) -> None:
    path = tmp_path / "extensions.csv"
    path.write_text("student,exercise,due,why\nalice,,2026-03-08T12:00,flu\n"
                    f"alice,{EX},2026-03-09 12:00:00 UTC,\nbob,,2026-03-05T01:00+01:00,\n")
    due = datetime(2026, 3, 1, 12, tzinfo=UTC)
    dates = Dates(due, LatePolicy(), read_extensions(path))
    assert dates.due_for("alice", EX) == (datetime(2026, 3, 9, 12, tzinfo=UTC), True)
    assert dates.due_for("alice", "other") == (datetime(2026, 3, 8, 12, tzinfo=UTC), True)
    assert dates.due_for("bob", EX) == (datetime(2026, 3, 5, tzinfo=UTC), True)
    assert dates.due_for("carol", EX) == (due, False)
    for text, error in (
            ("who,due\nalice,2026-03-08\n", "line 1: needs a header with the columns student "
                                            "and due"),
            ("student,due\nalice,2026-03-08\n,2026-03-09\n", "line 3: no student"),
            ("student,due\nalice,soon\n", "line 2: due 'soon' is not a date and time"),
            ("student,exercise,due\nalice,,2026-03-08\nalice,,2026-03-09\n",
             "line 3: a second due date for 'alice'"),
            ("student,due\nalice,2026-03-08\x00\n", "line 2"),
    ):
        path.write_text(text)
        with pytest.raises(PolicyError) as caught:
            read_extensions(path)
        assert str(caught.value).startswith(f"--extensions {path}, "), caught.value
        assert error in str(caught.value), caught.value
    path.write_bytes(b"student,due\n\xff,2026-03-08\n")
    with pytest.raises(PolicyError, match="not UTF-8"):
        read_extensions(path)


def _job(student: str, submitted: str) -> Job:
    exercise = Exercise(EX, corpus.source(), "digest")
    return Job(student, exercise, Path(f"{student}/{EX}.ipynb"), EX,
               timestamp=datetime.fromisoformat(submitted).replace(tzinfo=UTC))


def test_an_extension_makes_a_late_submission_on_time_and_says_which_date_applied() -> None:
    jobs = [_job("alice", "2026-03-03T13:00"), _job("bob", "2026-03-03T13:00")]
    rows = [Row(j.student, EX, "p", 2.0, 2.0, "passed", "") for j in jobs]
    due = datetime(2026, 3, 1, 12, tzinfo=UTC)
    extended = datetime(2026, 3, 4, 12, tzinfo=UTC)
    plain = Dates(due, LatePolicy.parse("per-day:10%"))
    assert [(r.student, r.points) for r in plain.late_rows(rows, jobs)] == \
        [("alice", -0.6), ("bob", -0.6)]  # 2 d 1 h late: 3 started days of 10 % of 2 points
    dates = Dates(due, LatePolicy.parse("per-day:10%"), {("alice", EX): extended})
    late = dates.late_rows(rows, jobs)
    assert [(r.student, r.points) for r in late] == [("bob", -0.6)]
    assert "after the due date 2026-03-01 12:00 UTC; policy per-day:10%: 0.6 points off" in \
        late[0].message
    later = _job("alice", "2026-03-04T12:30")
    late = dates.late_rows(rows[:1], [later])
    assert late[0].message.startswith("submitted 30 min after the extended due date "
                                      "2026-03-04 12:00 UTC")
    export = {line[3]: line for line in report._nbgrader_table(rows, jobs, dates, None)}
    assert export["alice"][1] == "2026-03-04 12:00:00 UTC"
    assert export["bob"][1] == "2026-03-01 12:00:00 UTC"


def test_a_submission_within_the_grace_period_costs_nothing_and_says_so() -> None:
    jobs = [_job("alice", "2026-03-01T12:10")]
    rows = [Row("alice", EX, "p", 2.0, 2.0, "passed", "")]
    due = datetime(2026, 3, 1, 12, tzinfo=UTC)
    [row] = Dates(due, LatePolicy.parse("zero", grace="15m")).late_rows(rows, jobs)
    assert (row.points, row.status) == (0.0, "within grace")
    assert "(within the grace period)" in row.message
    [row] = Dates(due, LatePolicy.parse("zero", grace="5m")).late_rows(rows, jobs)
    assert (row.points, row.status) == (-2.0, "late")


# --------------------------------------------------------------------------- overrides


def _autograded() -> list[Row]:
    return [Row("alice", EX, "ex02.gflops", 0.0, 1.0, "failed", "expected 40, got 20"),
            Row("alice", EX, "why", 0.0, 2.0, manual.NEEDS, "", judged=BY_HAND, answer="GPUs")]


def test_an_override_replaces_autograded_points_and_keeps_its_reason(tmp_path: Path) -> None:
    rows = _autograded()
    reason = "the task's units were ambiguous"
    filled = {("alice", EX, "ex02.gflops"): (1.0, reason, "")}
    assert manual.merge(rows, filled, tmp_path / "sheet.csv") == 1
    row = rows[0]
    assert (row.points, row.status, row.reason, row.judged) == (1.0, manual.OVERRIDDEN, reason,
                                                                BY_HAND)
    assert row.message.startswith(f"{reason} (overridden by hand; the grader gave 0 of 1, "
                                  "failed: expected 40, got 20)")
    lines = {line[2]: line for line in manual.sheet(rows, filled)}  # the next sheet keeps it
    at = manual.COLUMNS.index("points")
    assert lines["ex02.gflops"][at:at + 2] == ["1", reason]
    assert lines["why"][at:at + 2] == ["", ""]


def test_an_override_without_a_reason_is_refused(tmp_path: Path) -> None:
    rows = _autograded()
    with pytest.raises(manual.ManualSheetError) as caught:
        manual.merge(rows, {("alice", EX, "ex02.gflops"): (1.0, "", "")}, tmp_path / "s.csv")
    assert str(caught.value) == (
        f"--manual {tmp_path / 's.csv'}: alice/{EX}/ex02.gflops overrides an autograded row "
        "(failed, 0 of 1 points) without a reason: write why in its comment column")
    assert rows[0].points == 0 and rows[0].judged == OUTSIDE  # nothing half-merged


# --------------------------------------------------------------------------- the state


def test_the_gradebook_keeps_a_job_and_a_submission_that_cannot_be_read_is_left_out(
        tmp_path: Path) -> None:
    job = _job("alice", "2026-03-03T13:00")
    rows = [Row("alice", EX, "p", 2.0, 2.0, "passed", "")]
    assert gradebook.read_entries(tmp_path, print) == {}
    assert not (tmp_path / "gradebook.db").exists()  # reading creates nothing
    gradebook.write_entry(tmp_path, job, rows, "key", "basis", "secret")
    said: list[str] = []
    entry = gradebook.read_entries(tmp_path, said.append)[("alice", EX)]
    assert (entry.rows, entry.key, entry.submitted, said) == (rows, "key", True, [])
    again = gradebook.kept_job(entry, job.exercise)
    assert (again.path, again.assignment, again.timestamp) == (job.path, EX, job.timestamp)
    store = db.store(tmp_path)
    facts = json.dumps({**gradebook.job_facts(job), "timestamp": "soon"})
    for change in (f"UPDATE submissions SET job = '{facts}'", "UPDATE submissions SET job = '[1]'",
                   "UPDATE rows SET points = 'many'",  # SQLite keeps the text as it is
                   "UPDATE rows SET status = x'ff'"):  # bytes, not text
        gradebook.write_entry(tmp_path, job, rows, "key", "basis", "secret")
        with store.transaction() as conn:
            conn.exec_driver_sql(change)
        assert gradebook.read_entries(tmp_path, said.append) == {}
        assert said.pop() == (f"{store!r}: the submission of 'alice' for {EX!r} is not one "
                              "the grader can read; left out")


# --------------------------------------------------------------------------- through the batch


@pytest.fixture(scope="session")  # see tests/README.md: "Fixtures"
def graded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The class (good, stub, wrong) graded once: (its root, the grades folder to copy)."""
    root = tmp_path_factory.mktemp("term")
    corpus.build(root, root / "escape", list(STUDENTS))
    assert main(_argv(root, root / "grades")) == 0
    return root, root / "grades"


def _argv(root: Path, out: Path, submissions: Path | None = None) -> list[str]:
    return ["grade", str(submissions or root / "submissions"), "--source", str(root / "source"),
            "--out", str(out), "--jobs", "2", "--timeout", "15", "--memory", "2048",
            "--secret-file", str(root / "secret")]


def _copy(graded: tuple[Path, Path], tmp_path: Path) -> Path:
    out = tmp_path / "grades"
    shutil.copytree(graded[1], out)
    return out


def _resubmission(root: Path, tmp_path: Path) -> Path:
    """A folder holding wrong's corrected notebook alone."""
    folder = tmp_path / "resubmitted"
    corpus.write(folder / "wrong", corpus.student())
    return folder


def test_a_resubmission_is_merged_and_every_other_row_and_page_stays(
        graded: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root, _ = graded
    out = _copy(graded, tmp_path)
    before = {s: of(out, s) for s in STUDENTS}
    untouched = {s: pages(out, s) for s in ("good", "stub")}
    assert by_part(out)[("wrong", "ex02.gflops")]["status"] == "failed"
    folder = _resubmission(root, tmp_path)
    (folder / "good").mkdir()  # a folder with nothing in it replaces nothing graded before
    capsys.readouterr()
    assert main(_argv(root, out, folder)) == 0
    printed = capsys.readouterr().out
    assert "graded 1 submissions (0 unchanged" in printed
    assert "2 submission(s) not graded in this run kept as graded before" in printed
    assert {s: of(out, s) for s in ("good", "stub")} == {s: before[s] for s in ("good", "stub")}
    assert {s: pages(out, s) for s in ("good", "stub")} == untouched  # not even rewritten
    assert by_part(out)[("wrong", "ex02.gflops")]["status"] == "passed"
    assert "02_mini: 2 / 2" in (out / "feedback" / "wrong.md").read_text()
    export = {r["student_id"]: r["score"] for r in csv_rows(out / "nbgrader_grades.csv")}
    assert export == {"good": "2", "stub": "0", "wrong": "2"}
    # The merge is exact: the whole class graded afresh (same secret) gives the same bytes.
    whole = tmp_path / "whole"
    shutil.copytree(root / "submissions", whole)
    shutil.copy(tmp_path / "resubmitted" / "wrong" / f"{EX}.ipynb", whole / "wrong")
    fresh = tmp_path / "fresh"
    assert main(_argv(root, fresh, whole)) == 0
    for name in ("grades.csv", "nbgrader_grades.csv", "manual.csv"):
        assert (out / name).read_bytes() == (fresh / name).read_bytes(), name


def test_one_student_regraded_with_force_and_a_name_that_is_no_student_refused(
        graded: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root, _ = graded
    out = _copy(graded, tmp_path)
    before = (out / "grades.csv").read_bytes()
    capsys.readouterr()
    assert main([*_argv(root, out), "--student", "wrong", "--force"]) == 0
    assert "graded 1 submissions (0 unchanged" in capsys.readouterr().out
    assert (out / "grades.csv").read_bytes() == before  # same notebook, same rows, all kept
    run = out / ".work" / "good" / EX / "run.json"
    stamp = run.stat().st_mtime_ns
    assert main([*_argv(root, out), "--student", "good,stub", "--student", "good"]) == 0
    assert "graded 0 submissions (2 unchanged" in capsys.readouterr().out
    assert run.stat().st_mtime_ns == stamp  # reused, not run again
    assert main([*_argv(root, out), "--student", "wrong,nobody"]) == 2
    assert "--student nobody: no such student folder in" in capsys.readouterr().err
    assert (out / "grades.csv").read_bytes() == before


def test_the_roster_takes_a_student_who_left_out_of_the_gradebook(
        graded: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root, _ = graded
    out = _copy(graded, tmp_path)
    folder = _resubmission(root, tmp_path)
    assert main(_argv(root, out, folder)) == 0  # no roster: stub stays
    assert {r["student"] for r in csv_rows(out / "grades.csv")} == set(STUDENTS)
    roster = tmp_path / "roster.csv"
    roster.write_text("id,first_name,last_name,email\ngood,G,Ood,g@x.org\nwrong,W,Rong,\n")
    capsys.readouterr()
    assert main([*_argv(root, out, folder), "--roster", str(roster)]) == 0
    assert "removed 1 student(s) not on the roster from the gradebook: stub" in \
        capsys.readouterr().out
    assert {r["student"] for r in csv_rows(out / "grades.csv")} == {"good", "wrong"}
    assert not (out / "feedback" / "stub.md").exists()
    assert not (out / "feedback_html" / "stub.html").exists()
    assert gradebook.kept_entry(out, "stub", EX) is None
    assert "stub" not in gradebook.read_collected(out)
    assert not (out / "autograded" / "stub").exists() and (out / ".work" / "stub").exists()
    assert main(_argv(root, out, folder)) == 0  # and stays out
    assert {r["student"] for r in csv_rows(out / "grades.csv")} == {"good", "wrong"}


def test_a_state_file_of_an_older_grader_is_kept_and_flagged(
        graded: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root, _ = graded
    out = _copy(graded, tmp_path)
    before = of(out, "good")
    with db.store(out).transaction() as conn:  # as an older grader kept it: no basis, no facts
        conn.execute(db.submissions.update().where(db.submissions.c.student == "good")
                     .values(basis="", job="{}"))
    capsys.readouterr()
    assert main(_argv(root, out, _resubmission(root, tmp_path))) == 0
    assert f"kept submissions of {EX} were graded against another source" in \
        capsys.readouterr().out
    assert of(out, "good") == before
    assert main(_argv(root, out)) == 0  # the whole folder: good reused, its facts kept again
    printed = capsys.readouterr().out  # (wrong's first notebook is graded again)
    assert "graded 1 submissions (2 unchanged" in printed and "were graded against" not in printed
    kept = gradebook.kept_entry(out, "good", EX)
    assert kept is not None and kept.job["assignment"] == EX


def test_a_crash_before_the_gradebooks_are_written_loses_no_grade(
        graded: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root, _ = graded
    out = _copy(graded, tmp_path)

    def crash(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    with monkeypatch.context() as patch:
        patch.setattr(G, "write_outputs", crash)
        with pytest.raises(KeyboardInterrupt):
            G.grade(_resubmission(root, tmp_path), root / "source", out, progress=False,
                    settings=CLI_SETTINGS,
                    secret=G.load_or_create(root / "secret")[0])
    assert by_part(out)[("wrong", "ex02.gflops")]["status"] == "failed"  # not written yet
    summary = G.grade(root / "submissions", root / "source", out, progress=False,
                      settings=CLI_SETTINGS, students=["good"],
                      secret=G.load_or_create(root / "secret")[0])
    assert summary.graded == 0
    assert by_part(out)[("wrong", "ex02.gflops")]["status"] == "passed"  # from the state


def test_extensions_late_policies_and_overrides_through_the_batch(
        graded: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root, _ = graded
    out = _copy(graded, tmp_path)
    subs = tmp_path / "submissions"
    shutil.copytree(root / "submissions", subs)
    for student, stamp in (("good", "2026-03-03 12:01:00 UTC"),  # 2 d 1 min: 3 started days
                           ("wrong", "2026-03-03 12:01:00 UTC"),
                           ("stub", "2026-03-01 12:10:00 UTC")):  # within the grace
        (subs / student / "timestamp.txt").write_text(stamp)
    extensions = tmp_path / "extensions.csv"
    extensions.write_text(f"student,exercise,due\nwrong,{EX},2026-03-04T12:00\n")
    policy = [*_argv(root, out, subs), "--due", DUE, "--late", "per-day:25%", "--grace", "15m",
              "--late-cap", "40%"]
    capsys.readouterr()
    assert main([*policy, "--extensions", str(extensions)]) == 0
    assert "graded 0 submissions (3 unchanged" in capsys.readouterr().out  # dates: no rerun
    late = {s: r for (s, part), r in by_part(out).items() if part == "late penalty"}
    assert set(late) == {"good", "stub"}  # wrong was on time: its extension
    assert (late["good"]["points"], late["good"]["status"]) == ("-0.8", "late")  # capped
    assert "policy per-day:25%, grace 15 min, at most 40%: 0.8 points off" in \
        late["good"]["message"]
    assert (late["stub"]["points"], late["stub"]["status"]) == ("0.0", "within grace")
    export = {r["student_id"]: r for r in csv_rows(out / "nbgrader_grades.csv")}
    assert export["wrong"]["duedate"] == "2026-03-04 12:00:00 UTC"
    assert (export["good"]["late_submission_penalty"], export["good"]["score"]) == ("0.8", "1.2")
    assert main(policy) == 0  # without the extension wrong is late too
    assert "the last run applied --extensions (1 lines), this one has none" in \
        capsys.readouterr().out
    late = by_part(out)[("wrong", "late penalty")]
    assert late["points"] == "-0.8" and "after the due date 2026-03-01 12:00 UTC" in \
        late["message"]

    # An override of wrong's failed part: with a reason it is merged, without one refused.
    sheet = tmp_path / "sheet.csv"
    reason = "regraded: the hint misled everyone"
    sheet.write_text(f"student,exercise,cell,points,comment\nwrong,{EX},ex02.gflops,1,"
                     f"\"{reason}\"\n")
    assert main([*policy, "--extensions", str(extensions), "--manual", str(sheet)]) == 0
    row = by_part(out)[("wrong", "ex02.gflops")]
    assert (row["points"], row["status"], row["reason"], row["judged"]) == \
        ("1.0", "overridden", reason, "by hand")
    assert "the grader gave 0 of 1, failed" in row["message"]
    assert {r["student_id"]: r["score"] for r in csv_rows(out / "nbgrader_grades.csv")}[
        "wrong"] == "2"
    kept = {(r["student"], r["cell"]): r for r in csv_rows(out / "manual.csv")}
    assert (kept[("wrong", "ex02.gflops")]["points"],
            kept[("wrong", "ex02.gflops")]["comment"]) == ("1", reason)
    assert reason in (out / "feedback" / "wrong.md").read_text()
    sheet.write_text(f"student,exercise,cell,points,comment\nwrong,{EX},ex02.gflops,1,\n")
    capsys.readouterr()
    assert main(_argv(root, out, subs)) == 0  # a run that forgets them all is told so
    printed = capsys.readouterr().out
    assert all(f"the last run applied {flag} " in printed for flag in (
        "--due", "--late", "--extensions")), printed
    # ... but the hand grades are the gradebook's: they stay without the sheet.
    assert "the last run applied --manual" not in printed
    assert by_part(out)[("wrong", "ex02.gflops")]["status"] == "overridden"
    assert main([*policy, "--manual", str(sheet)]) == 2
    assert "overrides an autograded row (failed, 0 of 1 points) without a reason" in \
        capsys.readouterr().err


def test_a_resubmission_keeps_the_other_students_cells_for_the_class_report(
        graded: tuple[Path, Path], tmp_path: Path) -> None:
    """edu-dl report's identical cells: a run of one resubmission keeps the cells the class's
    other students were recorded with, even when their old download is gone."""
    root, _ = graded
    first = tmp_path / "download"
    shutil.copytree(root / "submissions", first)
    out = tmp_path / "grades"
    assert main(_argv(root, out, first)) == 0

    def cells() -> dict[str, set[str]]:
        found: dict[str, set[str]] = {}
        for student, _exercise, _cell, digest, _tokens in json.loads(
                (out / "class.json").read_text())["cells"]:
            found.setdefault(student, set()).add(digest)
        return found

    before = cells()
    assert before.get("good")  # the solved notebook has cells worth comparing
    shutil.rmtree(first)  # the first download is gone by the time wrong resubmits
    assert main(_argv(root, out, _resubmission(root, tmp_path))) == 0
    after = cells()
    assert after["good"] == before["good"]
    assert after.get("wrong")
