"""solutions/ -> exercises/: the student version of every notebook, as nbgrader would release it.

The release itself is nbgrader's (``nbgrader.student_version``); here: the authoring mistakes
that nbgrader would accept but our grading would not (``lint``), and the files written.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from pathlib import Path

from . import nbgrader as nbg
from . import parts
from .load import read_beside
from .nbgrader import AssignError, student_version
from .notebooks import Cell, Notebook, notebook_bytes, read_notebook, write_atomic
from .spec import Part


def lint(nb: Notebook, where: str = "notebook", course: Mapping[str, Part] | None = None
         ) -> list[str]:
    """Authoring mistakes that nbgrader would accept but that break our grading; [] if none.

    The check() rules apply to notebooks that use check(); an nbgrader assignment without it is
    held to nbgrader's own (schema 3, one grade_id per cell)."""
    problems: list[str] = []
    # A notebook that uses check() follows the course's rules (a test cell checks one Part; a
    # solution region sits inside a function). Any other is an nbgrader assignment as nbgrader
    # takes it: assert-style test cells, whole-cell solutions.
    uses_check = nbg.uses_check(nb)
    ids = Counter(nbg.grade_id(c) for c in nb.cells if nbg.nbgrader(c))
    for index, cell in enumerate(nb.cells):
        meta = nbg.nbgrader(cell)
        if not meta:
            continue
        at = f"{where}: cell {index} ({nbg.grade_id(cell)})"
        if meta.get("schema_version") != nbg.SCHEMA_VERSION:
            problems.append(f"{at}: nbgrader schema_version must be {nbg.SCHEMA_VERSION}")
        if not nbg.grade_id(cell):
            problems.append(f"{where}: cell {index}: nbgrader cell without a grade_id")
        elif ids[nbg.grade_id(cell)] > 1:
            problems.append(f"{at}: grade_id used by {ids[nbg.grade_id(cell)]} cells")
        if nbg.is_solution(cell) and cell.cell_type == "code" and uses_check:
            _, indents = nbg.clear_solutions(cell.source, at)
            if not indents:
                problems.append(f"{at}: solution cell without a {nbg.BEGIN_SOLUTION!r} region")
            elif "" in indents:
                problems.append(f"{at}: a solution region at the top level of the cell: put it "
                                "inside a function body, so the unsolved notebook still runs")
        if nbg.is_grade(cell) and not nbg.is_solution(cell) and cell.cell_type == "code" and \
                (uses_check or nbg.check_calls(cell.source)):
            problems += _lint_test_cell(cell, at, course)
    return problems


def _lint_test_cell(cell: Cell, at: str, course: Mapping[str, Part] | None = None
                    ) -> list[str]:
    """A graded test cell checks exactly one part, which exists and is worth the cell's points."""
    checked = set(nbg.check_calls(cell.source))
    if len(checked) != 1:
        return [f"{at}: a graded test cell must call check() for exactly one part "
                f"(found {sorted(checked) or 'none'})"]
    part_id = checked.pop()
    try:
        part = parts.get(part_id, course)
    except KeyError as exc:
        return [f"{at}: {exc.args[0]}"]
    if float(part.points) != nbg.points(cell):
        return [f"{at}: the cell is worth {nbg.points(cell):g} points but part {part_id} "
                f"has points={part.points:g}"]
    return []


def source_notebooks(source: Path) -> list[Path]:
    """The notebooks of a folder (or one notebook), checkpoints left out, sorted."""
    if source.is_file():
        return [source]
    if not source.is_dir():
        raise AssignError(f"{source}: no such notebook or folder")
    return sorted(p for p in source.glob("*.ipynb") if ".ipynb_checkpoints" not in p.parts)


def assign(source: str | Path, dest: str | Path, write: bool = True,
           dotted: list[str] | None = None) -> list[Path]:
    """Write the student version of every notebook of ``source`` into ``dest``.

    Returns the paths whose content changed (with ``write=False``: that would change, i.e. the
    stale ones). Raises AssignError listing every authoring problem before writing anything.
    ``dotted`` collects the names beside the source left out because they start with a dot
    (.git, .env: never released).
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
        inside = dest.resolve().relative_to(folder.resolve()).as_posix() \
            if dest.resolve().is_relative_to(folder.resolve()) else None
        for name, data in read_beside(folder, dotted=dotted).items():
            if inside is None or not (name + "/").startswith(inside + "/"):
                outputs[dest / name] = data
    for path in paths:
        nb = read_notebook(path)
        found = lint(nb, str(path), course)
        problems += found
        if not found:
            outputs[dest / path.name] = notebook_bytes(student_version(nb, str(path)))
    if problems:
        raise AssignError("\n".join(problems))
    changed = [p for p, data in outputs.items() if not p.exists() or p.read_bytes() != data]
    if write:
        for path in changed:
            write_atomic(path, outputs[path])
    return changed
