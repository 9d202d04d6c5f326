"""The speed tasks' gradebook rows (issue 25): ``edu-dl grade`` measures every speed part a
student answered, after the notebook ran and the part's check passed, and records a row of its
own. Honest and hostile submissions in one batch (``speed_corpus``): the fast solution earns the
row's points; the slow reference, a forged timer, a crash in the timed run and a worker the
function starts earn none, each costing that row alone; a second run measures nothing again."""

from __future__ import annotations

from pathlib import Path

import pytest
from fixtures.hostile import speed_corpus

from edu_dl.grading.model import OUTSIDE
from edu_dl.grading.settings import Settings
from edu_dl.grading.stages import speed_rows
from edu_dl.grading.term import batch as G
from edu_dl.grading.term.report import summary_text
from edu_dl.speed.tasks import TASKS

SETTINGS = Settings(timeout_s=30, budget_s=120, memory_mb=2048)


def test_a_speed_part_has_a_row_of_its_own(tmp_path: Path) -> None:
    """Nothing to run, nothing measured: the row is there all the same, with its points."""
    speed_corpus.build(tmp_path)
    summary = G.grade(tmp_path / "submissions", tmp_path / "source", tmp_path / "grades",
                      settings=SETTINGS, progress=False, students=["nothing"],
                      exercises_due=[speed_corpus.EXERCISE])
    row = next(r for r in summary.rows if r.part == speed_corpus.ROW)
    assert (row.status, row.points, row.max_points) == ("missing", 0.0,
                                                        TASKS[speed_corpus.PART].points)


@pytest.mark.timing
@pytest.mark.slow
def test_speed_rows_in_a_batch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Best of three rounds of 60 calls, as the grader measures (one round of 30 once measured a
    # fast submission as too slow on a loaded CI machine: the baseline's noise was its size).
    monkeypatch.setattr(speed_rows, "rounds", 3)
    monkeypatch.setattr(speed_rows, "calls", 60)
    speed_corpus.build(tmp_path)
    submissions, source, out = (tmp_path / name for name in ("submissions", "source", "grades"))
    summary = G.grade(submissions, source, out, settings=SETTINGS, progress=False, jobs=2)
    got = {(r.student, r.part): r for r in summary.rows}
    most = TASKS[speed_corpus.PART].points
    for name, (_, want) in speed_corpus.CASES.items():
        row = got[(name, speed_corpus.ROW)]
        assert row.status == want, (name, row)
        assert row.points == (most if want == "passed" else 0.0), (name, row)
        assert row.max_points == most and row.judged == OUTSIDE and row.message, (name, row)
    assert "goal 10x" in got[("fast", speed_corpus.ROW)].message
    assert "falls short of" in got[("forged_timer", speed_corpus.ROW)].message
    assert "exit code 3" in got[("crashes_when_timed", speed_corpus.ROW)].message
    assert "the values are right, but" in got[("detached_worker", speed_corpus.PART)].message
    assert "did not pass" in got[("detached_worker", speed_corpus.ROW)].message
    # The speed row alone pays for a crash in the timed run: the check passed, and keeps its point.
    assert got[("crashes_when_timed", speed_corpus.PART)].points == 1
    # The measurements' time is reported on a line of its own, not as the grader's own work.
    assert "measuring the speed tasks (sandboxed runs" in summary_text(summary)

    def measured_again(*args: object, **kwargs: object) -> None:
        raise AssertionError("an unchanged submission was measured again")

    monkeypatch.setattr(speed_rows, "measure_submitted", measured_again)
    again = G.grade(submissions, source, out, settings=SETTINGS, progress=False)
    assert again.graded == 0
    assert {(r.student, r.part): (r.status, r.points) for r in again.rows} == \
        {key: (r.status, r.points) for key, r in got.items()}
