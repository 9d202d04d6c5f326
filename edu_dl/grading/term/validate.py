"""``edu-dl validate``: grade one notebook exactly as ``edu-dl grade`` does, and say what fails.

It is the grader: the notebook is put in a temporary batch of one and graded by
:func:`edu_dl.grading.term.batch.grade` (restore, the runner in a bwrap sandbox, or the labelled
rlimits-only fallback where bwrap does not work, such as macOS; inputs drawn by the grader;
judging outside),
against ``--source`` when given (the instructor's source: its hidden tests and private parts),
else against the notebook itself. Its inputs come from a public, fixed secret
(``secret.VALIDATION_SECRET``), never the instructor's: the same notebook validates the same
way every time. Each gradebook row becomes a line of the report, with the cell it is about named
as JupyterLab shows it (``cellnames``: its first line, the heading above it); errors in cells that
no row grades are listed too (the notebook did not run cleanly to the end). The report is about
this notebook only: the part file it names is its own exercise's, a part graded by hand says so
(no tick, no zero), and it ends with the time the run took; a line on stderr says it is running.

Against the notebook itself, the checks come from the ``parts/`` folder beside it, which this
process imports (it judges outside the sandbox): so it loads them only when they belong to the
user running it, and says so. A TA reproducing a student's run passes ``--source`` (the
instructor's source) instead of trusting what lies beside the student's notebook.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from edu_dl.grading import sandbox
from edu_dl.grading.authoring import parts, release
from edu_dl.grading.model import (
    BY_HAND,
    NEEDS,
    NOT_ANSWERED,
    NothingToGrade,
    Refused,
    budget_row,
    safe_file_name,
)
from edu_dl.grading.nbgrader import TEXT_STUB, check_calls, is_grade, is_solution
from edu_dl.grading.notebooks import Notebook, NotebookError, read_notebook
from edu_dl.grading.protocol import PART_ID
from edu_dl.grading.settings import OWN_NOTEBOOK, Settings
from edu_dl.grading.stages import cellnames
from edu_dl.grading.stages.load import read_package_name
from edu_dl.grading.stages.run import sandbox_env
from edu_dl.grading.stages.secret import VALIDATION_SECRET
from edu_dl.grading.term.batch import executed_notebook, grade
from edu_dl.grading.trust.files import read_package

PASS, FAIL, BY_HAND_MARK = "✓", "✗", "·"  # a part graded by hand later gets no verdict here
LATER = "graded by hand later"
RUNNING = "running your notebook in the sandbox, as the grader will ..."
RUNNING_BARE = "running your notebook WITHOUT the sandbox (it does not work here) ..."
MAX_MESSAGE_LINES = 6


@dataclass
class PartResult:
    """One graded test cell after the run."""

    grade_id: str
    part_id: str
    points: float
    max_points: float
    ok: bool
    message: str
    by_hand: bool = False  # an answer or task a person grades: no verdict here
    cell: str = ""  # the cell it is about, as JupyterLab shows it (cellnames.describe)

    @property
    def later(self) -> bool:
        """Answered and left to a person: neither a tick nor a zero."""
        return self.by_hand and self.ok


@dataclass
class ValidationReport:
    """What the grader would see: per graded cell a result, plus errors outside graded cells."""

    path: Path
    parts: list[PartResult] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    sandbox: str = "bwrap"  # or "rlimits only": bwrap does not work here
    notes: list[str] = field(default_factory=list)  # where the checks came from
    seconds: float | None = None  # how long validate took (None: it did not get to run)

    @property
    def ok(self) -> bool:
        return bool(self.parts) and not self.errors and all(p.ok for p in self.parts)

    @property
    def score(self) -> tuple[float, float]:
        return sum(p.points for p in self.parts), sum(p.max_points for p in self.parts)

    def __str__(self) -> str:
        lines = [f"validate {self.path.name} (graded as edu-dl grade grades it: {self.sandbox})"]
        lines += [f"  {note}" for note in self.notes]
        width = max((len(p.part_id) for p in self.parts), default=0)
        for p in self.parts:
            first, *rest = (p.message or "").split("\n")
            if p.later:
                lines.append(f"  {BY_HAND_MARK} {p.part_id:<{width}}  ?/{p.max_points:g}  {LATER}")
                rest = []
            else:
                lines.append(f"  {PASS if p.ok else FAIL} {p.part_id:<{width}}  "
                             f"{p.points:g}/{p.max_points:g}" + (f"  {first}" if first else ""))
            lines += [f"      {line}" for line in rest[:MAX_MESSAGE_LINES]]
            if p.cell:
                lines.append(f"      in {p.cell}")
        lines += [f"  {FAIL} {error}" for error in self.errors]
        if not self.parts and not self.errors:
            lines.append(f"  {FAIL} no graded test cells: is this an exercise notebook?")
        got, total = self.score
        later = sum(p.max_points for p in self.parts if p.later)
        failing = sum(not p.ok for p in self.parts) + len(self.errors)
        verdict = "all parts pass" if self.ok else f"{failing} problem(s) would cost points"
        by_hand = f" ({later:g} of the {total:g} {LATER})" if later else ""
        lines.append(f"score {got:g}/{total:g} points{by_hand}; {verdict}")
        if self.seconds is not None:
            lines.append(f"took {self.seconds:.1f} s")
        return "\n".join(lines)


VALIDATOR = "validate"  # the one student of the batch


def _text(output: Any) -> str:
    if output.get("output_type") == "error":
        return f"{output.get('ename')}: {output.get('evalue')}"
    return ""


def _errors_outside_graded_cells(nb: Any) -> list[str]:
    errors, section = [], cellnames.sections(nb.cells)
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code" or (is_grade(cell) and not is_solution(cell)):
            continue
        error = next((_text(o) for o in cell.get("outputs", [])
                      if o.get("output_type") == "error"), None)
        if error is not None:
            errors.append(f"{cellnames.describe(nb.cells, index, section)} raised {error}")
    return errors


def validate(path: str | Path, timeout: float = 120.0, progress: bool = True,
             source: str | Path | None = None,
             log: Callable[[str], None] | None = None,
             without_sandbox: str | None = None) -> ValidationReport:
    """Grade ``path`` as ``edu-dl grade`` would (against ``source``, else itself).

    ``progress``: say on stderr that it runs (a run takes seconds to minutes). Where the sandbox
    cannot be built, one's own notebook (no ``source``) runs the labelled fallback; against an
    instructor's ``source`` the notebook is someone else's and, as in ``grade``, the run is
    refused (NoSandbox) unless ``without_sandbox`` is the opt-in (``--no-sandbox``).
    ``assign``'s self-test passes "" (refuse) or its ``--no-sandbox``."""
    start = time.monotonic()
    path = Path(path)
    report = ValidationReport(path)
    if without_sandbox is None:
        without_sandbox = OWN_NOTEBOOK if source is None else ""
    # Asked once here (NoSandbox where even the fallback cannot run), carried into grade().
    settings = Settings(timeout_s=timeout, without_sandbox=without_sandbox).checked()
    # Graded as the source notebook it answers: the one given, or the one named like it.
    name = Path(source).stem if source and Path(source).suffix == ".ipynb" else path.stem
    try:
        nb = read_notebook(path)
        if source is None:
            problem = _own_parts_problem(path, nb, report.notes)
            if problem:
                report.errors.append(problem)
                return report
        if progress:
            print(RUNNING_BARE if settings.sandbox_problem else RUNNING, file=sys.stderr,
                  flush=True)
        with tempfile.TemporaryDirectory(prefix="edu-dl-validate-") as tmp:
            batch = Path(tmp) / "submissions" / VALIDATOR
            batch.mkdir(parents=True)
            shutil.copyfile(path, batch / f"{name}.ipynb")
            graded_as = (Path(source) if source and Path(source).suffix == ".ipynb" else
                         Path(source) / f"{name}.ipynb" if source else path)
            refused = own_package(path, graded_as, batch) if graded_as.is_file() else ""
            if refused:
                report.errors.append(refused)
                return report
            out = Path(tmp) / "grades"
            summary = grade(batch.parent, Path(source) if source else path, out,
                              settings=settings, progress=False, log=log,
                              exercises_due=[name], secret=VALIDATION_SECRET,
                              allow_released=source is None,
                              speed_ahead=True,  # one notebook: its speed beside its run
                              feedback_pages=False)  # the report is printed, not a page
            jobs = [(row.exercise, row) for row in summary.rows if row.student == VALIDATOR]
            executed = executed_notebook(out, _job(batch / f"{name}.ipynb"), settings)
            if any(row.status == "crashed" for _, row in jobs):
                report.errors.append(_sandbox_log(out / ".work" / safe_file_name(VALIDATOR)
                                                  / name / "run.json"))
    except NotebookError as exc:
        report.errors.append(str(exc))
        return report
    report.sandbox = "bwrap" if summary.isolated else f"NOT isolated: {summary.problem}"
    answers, section = cellnames.row_cells(nb.cells), cellnames.sections(nb.cells)
    for _, row in jobs:
        manual = row.judged == BY_HAND and row.status == NEEDS
        ok = row.status == "passed" or manual
        cost = row.part == budget_row(row.exercise)  # what the run cost: always said
        message = (row.message if cost else LATER if manual
                   else "" if row.status == "passed" else
                   f"{NOT_ANSWERED}: 0 points, no person grades it; write your answer in place "
                   f"of {TEXT_STUB}" if row.status == NOT_ANSWERED else row.message)
        index = answers.get(row.part)
        cell = cellnames.describe(nb.cells, index, section) if index is not None else ""
        report.parts.append(PartResult(row.part, row.part, row.points, row.max_points, ok,
                                       message, row.judged == BY_HAND, cell))
    if executed is not None:
        report.errors += _errors_outside_graded_cells(executed)
    report.seconds = time.monotonic() - start
    return report


def _own_parts_problem(path: Path, nb: Notebook, notes: list[str]) -> str:
    """Why the part files beside the notebook cannot be used ('' when they can): one the
    notebook needs is missing, or one that would be imported belongs to someone else. Notes
    where the checks come from."""
    needed = sorted({match.group(1) for cell in nb.cells if cell.get("cell_type") == "code"
                     for part_id in check_calls(str(cell.get("source", "")))
                     if (match := PART_ID.match(part_id))})
    if not needed:
        return ""
    folder = path.parent / parts.FOLDER
    files = parts.part_files(path.parent)
    missing = [exercise for exercise in needed if exercise not in files]
    if missing:
        wanted = ", ".join(f"{parts.FOLDER}/{exercise}{release.SUFFIX}" for exercise in missing)
        return (f"this notebook's checks are in {wanted}, which is not beside {path.name}: "
                f"keep the notebook in the course's exercises/ folder (it holds "
                f"{parts.FOLDER}/), or copy the exercises/{parts.FOLDER}/ folder next to it")
    me = os.geteuid()
    for item in [folder, *(f for group in files.values() for f in group)]:
        owner = item.stat().st_uid
        if owner != me:
            return (f"{item.relative_to(path.parent)} beside the notebook belongs to another "
                    f"user (uid {owner}): validate imports the checks as you, so it uses only "
                    "part files that are yours; pass --source with the instructor's source "
                    "notebook or folder instead")
    # The checks of this notebook's exercises only: the folder's other part files are checked
    # above (validate loads them) but are no answer to the student's question.
    mine = ", ".join(f"{parts.FOLDER}/{f.name}" for exercise in needed for f in files[exercise])
    notes.append(f"checks from {mine} beside the notebook (yours)")
    return ""


def own_package(path: Path, source: Path, batch: Path) -> str:
    """Copy the student's own package beside ``path`` (its exercise's metadata
    ``edu_dl.package``, read from ``source``, the notebook it is graded as) beside the copy in
    ``batch``, read as ``edu-dl grade`` reads a submission's; what grade would refuse it for, or
    '' (nothing to copy, or copied)."""
    try:
        name = read_package_name(read_notebook(source), source)
    except NothingToGrade:  # grade refuses the source itself, naming it
        return ""
    if not name:
        return ""
    try:
        files = read_package(path.parent / name)
    except Refused as exc:
        return f"{exc}: edu-dl grade refuses the whole notebook for it"
    for inside, data in files.items():
        (batch / name / inside).parent.mkdir(parents=True, exist_ok=True)
        (batch / name / inside).write_bytes(data)
    return ""


def _sandbox_log(run_json: Path, lines: int = 12) -> str:
    """The last lines the sandbox printed, and what it runs: why a notebook may not start."""
    try:
        log = str(json.loads(run_json.read_text())["sandbox"]["log"])
    except (OSError, ValueError, KeyError, TypeError):
        log = ""
    tail = [line for line in log.splitlines() if line.strip()][-lines:]
    env = sandbox_env()
    return ("the sandbox could not run the notebook to the end; it runs "
            f"{sandbox.python()} with PYTHONPATH={env['PYTHONPATH']} and sees, read-only, the "
            "system's programs, that Python's environment and edu_dl, plus a private /tmp. "
            + ("Its last lines of output:\n" + "\n".join(f"    {line}" for line in tail)
               if tail else "It printed nothing."))


def _job(path: Path) -> Any:
    """The job grade made of the notebook: where its executed copy lies in autograded/."""
    from types import SimpleNamespace

    return SimpleNamespace(student=VALIDATOR, assignment=path.stem, path=path, refused="",
                           exercise=SimpleNamespace(name=path.stem))
