"""The gradebook rows of the speed tasks: one per speed part a submission answers.

After a submission ran and its parts were judged, the grader measures the speed of each function
a speed task grades (``speed.measure_submitted``: the function's source alone, in sandboxes of
its own, its CPU time read from outside) and records a row ``<part id>.speed``
(``tasks.speed_row``). Points: all of the task's for a ratio clearly at or above
``CREDIT_FRACTION`` x the goal ratio, none for one clearly below (``speed.verdict``): a ramp would
grade the noise. A ratio within ``speed.BAND`` of that line is not the machine's to decide: the
row "needs manual grading" (judged by hand, 0 points until a person fills in manual.csv), its
message the measurement, its answer the function measured. A speed is measured only for a
function whose correctness part passed (a wrong answer has no speed worth measuring); every
failure (a refused source, a crash, a timeout, a wrong answer on the secret's inputs, a grader
bug) costs this row alone. The time the measurements took is reported apart from the grader's
own work (``cost.speed_measured``).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from concurrent.futures import Executor, Future
from pathlib import Path

from edu_dl.grading import cost
from edu_dl.grading.model import BY_HAND, OUTSIDE, Job, Row
from edu_dl.grading.notebooks import Notebook
from edu_dl.grading.settings import Settings
from edu_dl.grading.stages.secret import Secret
from edu_dl.grading.stages.speed import (
    NEEDS_PERSON,
    ROUNDS,
    Measurement,
    measure_submitted,
    seed_for,
)
from edu_dl.machine.hardware import usable_cores
from edu_dl.speed.tasks import TASKS, speed_row

# What a batch measures with; tests lower them (each measurement costs seconds of CPU).
rounds = ROUNDS
calls: int | None = None  # None: each task's own


def measure_ahead(job: Job, notebook: Notebook, secret: Secret, settings: Settings,
                  hide: Iterable[Path], pool: Executor) -> dict[str, Future[Measurement]]:
    """Start measuring every speed task of the job's exercise on ``pool`` now, before the
    notebook runs (``edu-dl validate``: one notebook, and a second core that would otherwise
    wait). :func:`speed_rows` uses a measurement only for a function whose correctness part
    then passes; the others are dropped, waited for by ``pool``'s owner (no sandbox outlives
    its submission's grading: batch._grade_one's executor waits on exit). The same
    measurement as after the run: CPU time, read from outside, which the notebook running beside
    it does not change. Where there are two cores or more, each round's runs go two at a time
    (``measure``'s pairs): a student waits for validate's answer about half as long."""
    hide = list(hide)
    pairs = int(usable_cores().value) >= 2
    return {part_id: pool.submit(measure_submitted, notebook, part_id, seed_for(secret, part_id),
                                 rounds=rounds, calls=calls, hide=hide, settings=settings,
                                 pairs=pairs)
            for part_id, _ in job.exercise.parts if part_id in TASKS}


def speed_rows(job: Job, notebook: Notebook, judged: list[Row], secret: Secret,
               settings: Settings, hide: Iterable[Path] = (),
               ahead: Mapping[str, Future[Measurement]] | None = None) -> list[Row]:
    """A row per speed task of the job's exercise, after ``judged`` (its parts' rows);
    ``ahead``: measurements :func:`measure_ahead` started."""
    passed = {row.part for row in judged if row.status == "passed"}
    present = {row.part for row in judged}  # rows_for's (nothing judged) hold them already
    rows = []
    for part_id, _ in job.exercise.parts:
        if part_id in TASKS and speed_row(part_id) not in present:
            rows.append(_speed_row(job, notebook, part_id, part_id in passed, secret,
                                   settings, hide, (ahead or {}).get(part_id)))
    return rows


def _speed_row(job: Job, notebook: Notebook, part_id: str, correct: bool, secret: Secret,
               settings: Settings, hide: Iterable[Path],
               started: Future[Measurement] | None = None) -> Row:
    task = TASKS[part_id]
    row = Row(job.student, job.exercise.name, speed_row(part_id), 0.0,
              job.exercise.speed.get(speed_row(part_id), task.points), "not measured", "",
              settings.isolation(), OUTSIDE)
    if not correct:
        row.message = (f"not measured: the correctness part {part_id} did not pass, and only a "
                       "correct function's speed earns points")
        return row
    began = time.perf_counter()  # started ahead: only the time still waited for it counts
    try:
        found = started.result() if started is not None else measure_submitted(
            notebook, part_id, seed_for(secret, part_id), rounds=rounds, calls=calls,
            hide=hide, settings=settings)
    except Exception as exc:  # a grader bug costs this row, never the batch
        row.status, row.message = "grader error", f"{type(exc).__name__}: {exc}"
        return row
    finally:
        cost.speed_measured(time.perf_counter() - began)
    row.status, row.message = found.status, found.message
    if found.passed:
        row.points = row.max_points
    elif found.status == NEEDS_PERSON:  # too close to call: a person decides (manual.csv)
        row.judged, row.answer = BY_HAND, found.source
    return row
