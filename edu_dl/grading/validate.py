"""``edu-dl validate``: grade one notebook exactly as ``edu-dl grade`` does, and say what fails.

It is the grader: the notebook is put in a temporary batch of one and graded by
:func:`edu_dl.grading.batch.grade` (restore, the runner in a bwrap sandbox, or the labelled
rlimits-only fallback where bwrap does not work, such as macOS; fresh inputs; judging outside),
against ``--source`` when given (the instructor's source: its hidden tests and private parts),
else against the notebook itself. Each gradebook row becomes a line of the report; errors in
cells that no row grades are listed too (the notebook did not run cleanly to the end).
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .batch import executed_notebook, grade
from .model import BY_HAND
from .nbgrader import is_grade, is_solution
from .notebooks import NotebookError, read_notebook
from .settings import Settings

PASS, FAIL = "✓", "✗"
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


@dataclass
class ValidationReport:
    """What the grader would see: per graded cell a result, plus errors outside graded cells."""

    path: Path
    parts: list[PartResult] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    sandbox: str = "bwrap"  # or "rlimits only": bwrap does not work here

    @property
    def ok(self) -> bool:
        return bool(self.parts) and not self.errors and all(p.ok for p in self.parts)

    @property
    def score(self) -> tuple[float, float]:
        return sum(p.points for p in self.parts), sum(p.max_points for p in self.parts)

    def __str__(self) -> str:
        lines = [f"validate {self.path.name} (graded as edu-dl grade grades it: {self.sandbox})"]
        width = max((len(p.part_id) for p in self.parts), default=0)
        for p in self.parts:
            first, *rest = (p.message or "").split("\n")
            mark = PASS if p.ok else FAIL
            lines.append(f"  {mark} {p.part_id:<{width}}  {p.points:g}/{p.max_points:g}"
                         + (f"  {first}" if first else ""))
            lines += [f"      {line}" for line in rest[:MAX_MESSAGE_LINES]]
        lines += [f"  {FAIL} {error}" for error in self.errors]
        if not self.parts:
            lines.append(f"  {FAIL} no graded test cells: is this an exercise notebook?")
        got, total = self.score
        failing = sum(not p.ok for p in self.parts) + len(self.errors)
        verdict = "all parts pass" if self.ok else f"{failing} problem(s) would cost points"
        lines.append(f"score {got:g}/{total:g} points; {verdict}")
        return "\n".join(lines)


VALIDATOR = "validate"  # the one student of the batch


def _text(output: Any) -> str:
    if output.get("output_type") == "error":
        return f"{output.get('ename')}: {output.get('evalue')}"
    return ""


def _errors_outside_graded_cells(nb: Any) -> list[str]:
    errors, code_index = [], 0
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        code_index += 1
        if is_grade(cell) and not is_solution(cell):
            continue
        error = next((_text(o) for o in cell.get("outputs", [])
                      if o.get("output_type") == "error"), None)
        if error is not None:
            errors.append(f"code cell {code_index} raised {error}")
    return errors


def validate(path: str | Path, timeout: float = 120.0, progress: bool = True,
             source: str | Path | None = None,
             log: Callable[[str], None] | None = None) -> ValidationReport:
    """Grade ``path`` as ``edu-dl grade`` would (against ``source``, else itself)."""
    path = Path(path)
    report = ValidationReport(path)
    settings = Settings(timeout_s=timeout)
    # Graded as the source notebook it answers: the one given, or the one named like it.
    name = Path(source).stem if source and Path(source).suffix == ".ipynb" else path.stem
    try:
        read_notebook(path)
        with tempfile.TemporaryDirectory(prefix="edu-dl-validate-") as tmp:
            batch = Path(tmp) / "submissions" / VALIDATOR
            batch.mkdir(parents=True)
            shutil.copyfile(path, batch / f"{name}.ipynb")
            out = Path(tmp) / "grades"
            summary = grade(batch.parent, Path(source) if source else path, out,
                              settings=settings, progress=progress, log=log,
                              exercises_due=[name])
            jobs = [(row.exercise, row) for row in summary.rows if row.student == VALIDATOR]
            executed = executed_notebook(out, _job(batch / f"{name}.ipynb"), settings)
    except NotebookError as exc:
        report.errors.append(str(exc))
        return report
    report.sandbox = "bwrap" if summary.isolated else f"NOT isolated: {summary.problem}"
    for _, row in jobs:
        manual = row.judged == BY_HAND and row.status == "needs manual grading"
        ok = row.status == "passed" or manual
        message = ("needs manual grading (a person grades it)" if manual
                   else "" if row.status == "passed" else row.message)
        report.parts.append(PartResult(row.part, row.part, row.points, row.max_points, ok,
                                       message))
    if executed is not None:
        report.errors += _errors_outside_graded_cells(executed)
    return report


def _job(path: Path) -> Any:
    """The job grade made of the notebook: where its executed copy lies in autograded/."""
    from types import SimpleNamespace

    return SimpleNamespace(student=VALIDATOR, assignment=path.stem, path=path, refused="",
                           exercise=SimpleNamespace(name=path.stem))
