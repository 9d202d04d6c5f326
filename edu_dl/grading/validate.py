"""``edu-dl validate``: run a notebook as the grader will and say which parts would fail.

A fresh kernel (nbclient), top to bottom, in a temporary directory, with ``check`` in its normal
mode: a graded test cell passes when every check in it printed a pass and nothing raised.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import notebooks as nbs
from .protocol import GRADING_ENV

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

    @property
    def ok(self) -> bool:
        return bool(self.parts) and not self.errors and all(p.ok for p in self.parts)

    @property
    def score(self) -> tuple[float, float]:
        return sum(p.points for p in self.parts), sum(p.max_points for p in self.parts)

    def __str__(self) -> str:
        lines = [f"validate {self.path.name} (fresh kernel, top to bottom, as the grader runs it)"]
        width = max((len(p.part_id) for p in self.parts), default=0)
        for p in self.parts:
            first, *rest = (p.message or "").split("\n") if not p.ok else [""]
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


@contextlib.contextmanager
def _grader_environment() -> Iterator[None]:
    """The kernel inherits this: normal check mode, no progress bars, a non-GUI plot backend."""
    saved = dict(os.environ)
    os.environ.pop(GRADING_ENV, None)
    os.environ.update(TQDM_DISABLE="1", MPLBACKEND="Agg")
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def _text(output: Any) -> str:
    if output.get("output_type") == "stream":
        return str(output.get("text", ""))
    if output.get("output_type") == "error":
        return f"{output.get('ename')}: {output.get('evalue')}"
    return str(output.get("data", {}).get("text/plain", ""))


def _cell_error(cell: nbs.Cell) -> str | None:
    for output in cell.get("outputs", []):
        if output.get("output_type") == "error":
            return f"{output.get('ename')}: {output.get('evalue')}"
    return None


def _judge_test_cell(cell: nbs.Cell) -> PartResult:
    parts = nbs.check_calls(cell.source)
    part_id = parts[0] if parts else str(nbs.grade_id(cell))
    max_points = nbs.points(cell)
    # check() prints; its True/False return value (Out[n]) is not part of the message
    text = "".join(_text(o) for o in cell.get("outputs", []) if o.get("output_type") == "stream")
    error = _cell_error(cell)
    failures = [line[len(FAIL):].strip() for line in text.splitlines()
                if line.startswith(FAIL)]
    if error:
        message = f"the test cell raised {error}"
    elif failures:
        # keep the failure's own detail lines (indented under the ✗ line)
        start = text.index(FAIL)
        lines = [line.strip() for line in text[start + 1:].strip().splitlines()]
        lines[0] = lines[0].removeprefix(f"{part_id}:").strip()
        message = "\n".join(lines)
    elif execution_missing(cell):
        message = "the test cell did not run"
    elif PASS not in text:
        message = "the test cell printed no result (was check() removed?)"
    else:
        return PartResult(str(nbs.grade_id(cell)), part_id, max_points, max_points, True, "")
    return PartResult(str(nbs.grade_id(cell)), part_id, 0.0, max_points, False, message)


def execution_missing(cell: nbs.Cell) -> bool:
    return cell.get("execution_count") is None


def validate(path: str | Path, timeout: float = 120.0, progress: bool = True) -> ValidationReport:
    """Run ``path`` in a fresh kernel in a temporary directory and judge its graded cells."""
    from nbclient import NotebookClient
    from nbclient.exceptions import CellTimeoutError, DeadKernelError
    from tqdm.auto import tqdm

    path = Path(path)
    report = ValidationReport(path)
    try:
        nb = nbs.read_notebook(path)
    except nbs.NotebookError as exc:
        report.errors.append(str(exc))
        return report
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    n_code = sum(c.cell_type == "code" for c in nb.cells)
    with tempfile.TemporaryDirectory(prefix="edu-dl-validate-") as tmp, _grader_environment(), \
            tqdm(total=n_code, desc=f"running {path.name}", unit="cell",
                 disable=not progress) as bar:
        shutil.copy(path, Path(tmp) / path.name)  # relative paths resolve as in the grader
        client = NotebookClient(nb, timeout=timeout, kernel_name="python3", allow_errors=True,
                                record_timing=False, resources={"metadata": {"path": tmp}},
                                on_cell_executed=lambda **_: bar.update())
        try:
            client.execute()
        except CellTimeoutError:
            report.errors.append(f"a cell ran longer than {timeout:g} s: the grader would stop "
                                 "there (an endless loop?)")
        except DeadKernelError as exc:
            report.errors.append(f"the kernel died ({exc}): the grader would stop there")
    code_index = 0
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        code_index += 1
        if nbs.is_grade(cell) and not nbs.is_solution(cell):
            report.parts.append(_judge_test_cell(cell))
        elif (error := _cell_error(cell)) is not None:
            report.errors.append(f"code cell {code_index} raised {error}")
    return report
