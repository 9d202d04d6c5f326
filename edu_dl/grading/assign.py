"""solutions/ -> exercises/: the student version of every notebook, as nbgrader would release it.

Per cell, in nbgrader's order (LockCells, ClearSolutions, ClearOutput, ClearHiddenTests,
ComputeChecksums): lock test and read-only cells, replace solution regions by ``raise
NotImplementedError()``, clear outputs, drop hidden tests, record nbgrader's checksums.
"""

from __future__ import annotations

import copy
from collections import Counter
from collections.abc import Mapping
from pathlib import Path

from . import notebooks as nbs
from . import parts
from .notebooks import Notebook, NotebookError
from .spec import Part

# Output-related cell metadata: nbconvert's ClearOutput drops the first two; "execution" holds
# nbclient's timestamps, which would make the generated file differ on every run.
OUTPUT_METADATA = ("collapsed", "scrolled", "execution")


class AssignError(NotebookError):
    """A solutions notebook that would make a broken or ungradable exercise."""


def student_version(nb: Notebook, where: str = "notebook") -> Notebook:
    """The exercise notebook for one solutions notebook (a new object; ``nb`` is untouched)."""
    nb = copy.deepcopy(nb)
    # The digest of the course code that executed the solution (edu_dl.notebook_run): an
    # exercise is never executed, and would only change whenever its solution is re-run.
    nb.metadata.pop("edu_dl", None)
    for index, cell in enumerate(nb.cells):
        at = f"{where}: cell {index}"
        _lock(cell)
        new, regions = nbs.clear_solutions(cell.source, at)
        if regions and not nbs.is_solution(cell):
            raise AssignError(f"{at}: a solution region in a cell not marked as a solution cell")
        if nbs.is_solution(cell) and not regions:
            new = nbs.CODE_STUB if cell.cell_type == "code" else nbs.TEXT_STUB
        cell.source = new
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
            for field in OUTPUT_METADATA:
                cell.metadata.pop(field, None)
        cell.source, hidden = nbs.remove_hidden_tests(cell.source, at)
        if hidden and not nbs.is_grade(cell):
            raise AssignError(f"{at}: hidden tests in a cell that is not a graded test cell")
        if nbs.is_grade(cell) or nbs.is_solution(cell) or nbs.is_locked(cell):
            cell.metadata.nbgrader["checksum"] = nbs.checksum(cell)
            cell.metadata.nbgrader["cell_type"] = cell.cell_type
    return nb


def _lock(cell: nbs.Cell) -> None:
    """nbgrader's LockCells: test and read-only cells cannot be edited, none of them deleted."""
    if nbs.is_solution(cell):
        cell.metadata["deletable"] = False
    elif nbs.is_grade(cell) or nbs.is_locked(cell):
        cell.metadata["deletable"] = False
        cell.metadata["editable"] = False


def lint(nb: Notebook, where: str = "notebook", course: Mapping[str, Part] | None = None
         ) -> list[str]:
    """Authoring mistakes that nbgrader would accept but that break our grading; [] if none.

    The check() rules apply to notebooks that use check(); an nbgrader assignment without it is
    held to nbgrader's own (schema 3, one grade_id per cell)."""
    problems: list[str] = []
    # A notebook that uses check() follows the course's rules (a test cell checks one Part; a
    # solution region sits inside a function). Any other is an nbgrader assignment as nbgrader
    # takes it: assert-style test cells, whole-cell solutions.
    uses_check = nbs.uses_check(nb)
    ids = Counter(nbs.grade_id(c) for c in nb.cells if nbs.nbgrader(c))
    for index, cell in enumerate(nb.cells):
        meta = nbs.nbgrader(cell)
        if not meta:
            continue
        at = f"{where}: cell {index} ({nbs.grade_id(cell)})"
        if meta.get("schema_version") != nbs.SCHEMA_VERSION:
            problems.append(f"{at}: nbgrader schema_version must be {nbs.SCHEMA_VERSION}")
        if not nbs.grade_id(cell):
            problems.append(f"{where}: cell {index}: nbgrader cell without a grade_id")
        elif ids[nbs.grade_id(cell)] > 1:
            problems.append(f"{at}: grade_id used by {ids[nbs.grade_id(cell)]} cells")
        if nbs.is_solution(cell) and cell.cell_type == "code" and uses_check:
            _, indents = nbs.clear_solutions(cell.source, at)
            if not indents:
                problems.append(f"{at}: solution cell without a {nbs.BEGIN_SOLUTION!r} region")
            elif "" in indents:
                problems.append(f"{at}: a solution region at the top level of the cell: put it "
                                "inside a function body, so the unsolved notebook still runs")
        if nbs.is_grade(cell) and not nbs.is_solution(cell) and cell.cell_type == "code" and \
                (uses_check or nbs.check_calls(cell.source)):
            problems += _lint_test_cell(cell, at, course)
    return problems


def _lint_test_cell(cell: nbs.Cell, at: str, course: Mapping[str, Part] | None = None
                    ) -> list[str]:
    """A graded test cell checks exactly one part, which exists and is worth the cell's points."""
    from .parts import get as get_part

    parts = set(nbs.check_calls(cell.source))
    if len(parts) != 1:
        return [f"{at}: a graded test cell must call check() for exactly one part "
                f"(found {sorted(parts) or 'none'})"]
    part_id = parts.pop()
    try:
        part = get_part(part_id, course)
    except KeyError as exc:
        return [f"{at}: {exc.args[0]}"]
    if float(part.points) != nbs.points(cell):
        return [f"{at}: the cell is worth {nbs.points(cell):g} points but part {part_id} "
                f"has points={part.points:g}"]
    return []


def source_notebooks(source: Path) -> list[Path]:
    """The notebooks of a folder (or one notebook), checkpoints left out, sorted."""
    if source.is_file():
        return [source]
    if not source.is_dir():
        raise AssignError(f"{source}: no such notebook or folder")
    return sorted(p for p in source.glob("*.ipynb") if ".ipynb_checkpoints" not in p.parts)


def assign(source: str | Path, dest: str | Path, write: bool = True) -> list[Path]:
    """Write the student version of every notebook of ``source`` into ``dest``.

    Returns the paths whose content changed (with ``write=False``: that would change, i.e. the
    stale ones). Raises AssignError listing every authoring problem before writing anything.
    """
    source, dest = Path(source), Path(dest)
    paths = source_notebooks(source)
    if not paths:
        raise AssignError(f"{source}: no .ipynb notebooks")
    outputs: dict[Path, bytes] = {}
    problems: list[str] = []
    folder = source if source.is_dir() else source.parent
    try:
        course = parts.course_parts(folder)
    except KeyError as exc:
        raise AssignError(str(exc.args[0]) if exc.args else str(exc)) from None
    # The public half of the instructor's parts goes with the student version (check() answers
    # at once); the private half (parts/<exercise>.private.py) stays beside the source.
    for files in parts.part_files(folder).values():
        for path in files:
            if not path.name.endswith(parts.PRIVATE):
                outputs[dest / parts.FOLDER / path.name] = path.read_bytes()
    if source.is_dir():  # the files beside the notebooks (data, images), as nbgrader copies them
        from .grade import read_beside

        inside = dest.resolve().relative_to(folder.resolve()).as_posix() \
            if dest.resolve().is_relative_to(folder.resolve()) else None
        for name, data in read_beside(folder).items():
            if inside is None or not (name + "/").startswith(inside + "/"):
                outputs[dest / name] = data
    for path in paths:
        nb = nbs.read_notebook(path)
        found = lint(nb, str(path), course)
        problems += found
        if not found:
            outputs[dest / path.name] = nbs.notebook_bytes(student_version(nb, str(path)))
    if problems:
        raise AssignError("\n".join(problems))
    changed = [p for p, data in outputs.items() if not p.exists() or p.read_bytes() != data]
    if write:
        for path in changed:
            nbs.write_atomic(path, outputs[path])
    return changed
