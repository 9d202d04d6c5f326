"""nbgrader's rules in one place: its cell metadata, its markers, its release and its scoring.

The markers and metadata are nbgrader's (schema version 3), so an nbgrader user can take the
notebooks as they are. A marker is any line that contains its text, as in nbgrader.

- Metadata: ``metadata.nbgrader`` (grade, solution, locked, task, grade_id, points) and
  nbgrader's checksum of a cell (``utils.compute_checksum``).
- Release (:func:`student_version`), in nbgrader's order of preprocessors: LockCells,
  ClearSolutions, ClearOutput, ClearHiddenTests, ComputeChecksums.
- Scoring (:func:`determine_grade`), as nbgrader 0.9.6's ``utils.determine_grade``, rule for rule:
  a graded solution cell (code or Markdown) whose checksum is the released one (untouched): 0;
  otherwise it needs a person (None); a code test cell: the first output that is an error or a
  stderr stream gives 0; the first ``execute_result`` before those gives partial credit
  (``partial_grade``); no such output: full; any other graded cell (Markdown, not a solution):
  needs a person (None). Task cells are never scored automatically. The outputs come from the
  executed notebook, which the student's own code produced inside the sandbox: as under
  nbgrader, a student can fool an assert cell (the check/Part path is the one judged outside).
"""

from __future__ import annotations

import copy
import hashlib
import re
from typing import Any

from edu_dl.grading.model import GradedCell
from edu_dl.grading.notebooks import Cell, Notebook, NotebookError

BEGIN_SOLUTION = "### BEGIN SOLUTION"
END_SOLUTION = "### END SOLUTION"
BEGIN_HIDDEN = "### BEGIN HIDDEN TESTS"
END_HIDDEN = "### END HIDDEN TESTS"
# nbgrader's ClearSolutions.code_stub["python"] and text_stub: the same stubs, the same output.
CODE_STUB = "# YOUR CODE HERE\nraise NotImplementedError()"
TEXT_STUB = "YOUR ANSWER HERE"
SCHEMA_VERSION = 3
# A check call in a test cell: check("ex08.relu_backward", relu_backward ...
CHECK_CALL = re.compile(r"""\bcheck\(\s*["'](?P<part>[^"']+)["']""")
# Output-related cell metadata: nbconvert's ClearOutput drops the first two; "execution" holds
# nbclient's timestamps, which would make the generated file differ on every run.
OUTPUT_METADATA = ("collapsed", "scrolled", "execution")


class AssignError(NotebookError):
    """A solutions notebook that would make a broken or ungradable exercise."""


class PartialCreditError(ValueError):
    """nbgrader raises (and stops) on partial credit above the cell's points."""


# --------------------------------------------------------------------------- metadata


def nbgrader(cell: Cell) -> dict[str, Any]:
    """The cell's metadata.nbgrader ({} for an ordinary cell)."""
    meta = cell.get("metadata", {}).get("nbgrader", {})
    return meta if isinstance(meta, dict) else {}


def is_solution(cell: Cell) -> bool:
    """Whether nbgrader marks the cell a solution (``metadata.nbgrader.solution``)."""
    return bool(nbgrader(cell).get("solution", False))


def is_grade(cell: Cell) -> bool:
    """Whether nbgrader marks the cell graded (``metadata.nbgrader.grade``)."""
    return bool(nbgrader(cell).get("grade", False))


def is_locked(cell: Cell) -> bool:
    """Locked as nbgrader reads it: solution cells never are; grade cells always are."""
    if is_solution(cell):
        return False
    return is_grade(cell) or bool(nbgrader(cell).get("locked", False))


def grade_id(cell: Cell) -> str | None:
    """The cell's nbgrader grade_id as a string; None when it has none."""
    value = nbgrader(cell).get("grade_id")
    return str(value) if value is not None else None


def points(cell: Cell) -> float:
    """The cell's nbgrader points; 0.0 for a cell that is not graded."""
    return float(nbgrader(cell).get("points", 0.0)) if is_grade(cell) else 0.0


def check_calls(source: str) -> list[str]:
    """The part ids named by check("...") calls in a cell's source, in order."""
    return [m.group("part") for m in CHECK_CALL.finditer(source)]


def uses_check(nb: Notebook) -> bool:
    """Does the notebook use edu_dl's check() (an import of edu_dl.grading or a check call in a
    test cell)? If not, it is an nbgrader assignment graded by its cells' outputs."""
    return any(cell.cell_type == "code" and ("edu_dl.grading" in cell.source or (
        is_grade(cell) and check_calls(cell.source))) for cell in nb.cells)


def checksum(cell: Cell) -> str:
    """nbgrader's utils.compute_checksum: md5 of source, type, flags, grade_id and points."""
    m = hashlib.md5()
    for text in (cell.source, cell.cell_type, str(is_grade(cell)), str(is_solution(cell)),
                 str(is_locked(cell)), nbgrader(cell)["grade_id"]):
        m.update(text.encode("utf-8"))
    if is_grade(cell):
        m.update(str(float(nbgrader(cell)["points"])).encode("utf-8"))
    return m.hexdigest()


# --------------------------------------------------------------------------- marker regions


def replace_regions(source: str, begin: str, end: str, stub: str | None,
                    where: str) -> tuple[str, list[str]]:
    """Replace each begin..end region (markers included) by ``stub`` at the begin line's indent.

    ``stub=None`` removes the region. Returns (new source, the indents of the regions found).
    Lines are split on "\\n" exactly as nbgrader does, so the result matches it byte for byte.
    """
    out: list[str] = []
    indents: list[str] = []
    inside = False
    for number, line in enumerate(source.split("\n"), start=1):
        if begin.lstrip("# ") in line:
            if inside:
                raise NotebookError(f"{where}: line {number}: {begin!r} inside another region")
            inside = True
            indent = re.match(r"\s*", line).group(0)  # type: ignore[union-attr]
            indents.append(indent)
            if stub is not None:
                out.extend(indent + stub_line for stub_line in stub.split("\n"))
        elif end.lstrip("# ") in line:
            if not inside:
                raise NotebookError(f"{where}: line {number}: {end!r} without {begin!r}")
            inside = False
        elif not inside:
            out.append(line)
    if inside:
        raise NotebookError(f"{where}: {begin!r} has no matching {end!r}")
    return "\n".join(out), indents


def clear_solutions(source: str, where: str, cell_type: str = "code") -> tuple[str, list[str]]:
    """Solution regions -> nbgrader's stub (ClearSolutions: the code stub in a code cell,
    ``YOUR ANSWER HERE`` in a Markdown one); returns (source, region indents)."""
    stub = CODE_STUB if cell_type == "code" else TEXT_STUB
    return replace_regions(source, BEGIN_SOLUTION, END_SOLUTION, stub, where)


def unanswered(answer: str, released: str | None) -> bool:
    """Is a graded answer untouched: the release's text (``released``, None if unknown) or
    nbgrader's stub alone, whitespace at either end aside? nbgrader compares checksums only
    (:func:`determine_grade`); this also catches an answer saved with another cell's metadata
    or a trailing newline, and, where the release is not known (``validate`` against the
    notebook itself), a stub left as it was."""
    text = answer.strip()
    return text in (TEXT_STUB, CODE_STUB) or (released is not None and text == released.strip())


def remove_hidden_tests(source: str, where: str) -> tuple[str, int]:
    """Drop hidden-test regions; returns (source, number of regions removed)."""
    new, indents = replace_regions(source, BEGIN_HIDDEN, END_HIDDEN, None, where)
    return new, len(indents)


def strip_hidden_tests(source: str) -> str:
    """The source with every hidden-test region gone, for anything a student reads: as
    remove_hidden_tests, and on malformed markers everything from a BEGIN line to its END line
    (or to the end) is dropped all the same."""
    try:
        return remove_hidden_tests(source, "feedback")[0]
    except NotebookError:
        kept, inside = [], False
        for line in source.split("\n"):
            if BEGIN_HIDDEN.lstrip("# ") in line:
                inside = True
            elif END_HIDDEN.lstrip("# ") in line:
                inside = False
            elif not inside:
                kept.append(line)
        return "\n".join(kept)


def hidden_lines(source: str) -> frozenset[int]:
    """The lines of ``source`` (numbered from 1, as a traceback numbers a cell's lines) that a
    hidden-test region holds, its marker lines included; on malformed markers, as
    :func:`strip_hidden_tests`: from a BEGIN line to its END line, or to the end."""
    lines: set[int] = set()
    inside = False
    for number, line in enumerate(source.split("\n"), start=1):
        if BEGIN_HIDDEN.lstrip("# ") in line:
            inside = True
        if inside:
            lines.add(number)
        if END_HIDDEN.lstrip("# ") in line:
            inside = False
    return frozenset(lines)


def hidden_failure(error: str) -> str:
    """What a student reads of an error a hidden test raised (``error``: "ename: evalue" or the
    name alone): that a hidden test failed, and the exception; never the hidden code."""
    return f"a hidden test failed ({error.strip().rstrip(':').strip() or 'an error'})"


# --------------------------------------------------------------------------- the release


# What of a source notebook's metadata ``edu_dl`` the student version keeps: what a student's
# validate needs to grade as the grader does (the budget; the name of the student's own package).
STUDENT_METADATA = ("budget", "package")


def student_version(nb: Notebook, where: str = "notebook") -> Notebook:
    """The exercise notebook for one solutions notebook (a new object; ``nb`` is untouched)."""
    nb = copy.deepcopy(nb)
    # The digest of the course code that executed the solution (edu_dl.notebook.run): an
    # exercise is never executed, and would only change whenever its solution is re-run. Its
    # budget and its package's name ship (STUDENT_METADATA): a student's validate judges it as
    # the grader does.
    course = nb.metadata.pop("edu_dl", None)
    shipped = {key: copy.deepcopy(course[key]) for key in STUDENT_METADATA
               if isinstance(course, dict) and key in course}
    if shipped:
        nb.metadata["edu_dl"] = shipped
    for index, cell in enumerate(nb.cells):
        at = f"{where}: cell {index}"
        # A cell's own edu_dl metadata (a rubric for the person who grades it) stays with the
        # source: a rubric often names what a good answer holds.
        cell.metadata.pop("edu_dl", None)
        _lock(cell)
        new, regions = clear_solutions(cell.source, at, cell.cell_type)
        if regions and not is_solution(cell):
            raise AssignError(f"{at}: a solution region in a cell not marked as a solution cell")
        if is_solution(cell) and not regions:
            new = CODE_STUB if cell.cell_type == "code" else TEXT_STUB
        cell.source = new
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
            for field in OUTPUT_METADATA:
                cell.metadata.pop(field, None)
        cell.source, hidden = remove_hidden_tests(cell.source, at)
        if hidden and not is_grade(cell):
            raise AssignError(f"{at}: hidden tests in a cell that is not a graded test cell")
        if is_grade(cell) or is_solution(cell) or is_locked(cell):
            cell.metadata.nbgrader["checksum"] = checksum(cell)
            cell.metadata.nbgrader["cell_type"] = cell.cell_type
    return nb


DEFINITION = re.compile(r"(?P<indent>\s*)(?:async\s+)?(?:def|class)\s+(?P<name>\w+)")


def enclosing_name(lines: list[str], number: int) -> str:
    """The dotted name of the function or class that holds line ``number`` (0-based) of a
    module ('Tape.matmul'), '' at the module's top level."""
    indent = len(lines[number]) - len(lines[number].lstrip())
    names: list[str] = []
    for line in reversed(lines[:number]):
        found = DEFINITION.match(line)
        if found and len(found["indent"]) < indent:
            names.append(found["name"])
            indent = len(found["indent"])
    return ".".join(reversed(names))


def student_module(source: str, where: str) -> tuple[str, int]:
    """A module of the students' own package as it ships: each solution region replaced by
    nbgrader's stub, whose NotImplementedError names what is missing and where ('Tape.matmul in
    mytorch/tape.py'), so that a later exercise that calls it says which earlier piece to write.
    ``where``: the module's path, as a student's import finds it. Returns (source, regions)."""
    lines = source.split("\n")
    names = [enclosing_name(lines, number) for number, line in enumerate(lines)
             if BEGIN_SOLUTION.lstrip("# ") in line]
    new, indents = replace_regions(source, BEGIN_SOLUTION, END_SOLUTION, "\0", where)
    stubs = iter(names)
    out: list[str] = []
    for line in new.split("\n"):
        if line.strip() != "\0":
            out.append(line)
            continue
        name = next(stubs)
        missing = f"{name} in {where}" if name else where
        indent = line[:-1]
        out += [f"{indent}# YOUR CODE HERE",
                f"{indent}raise NotImplementedError({missing + ' is not written yet'!r})"]
    return "\n".join(out), len(indents)


def withholds(nb: Notebook) -> bool:
    """Whether the student version keeps anything of ``nb`` from students: a solution, a
    hidden test. False for a notebook that is a student version already (exercises/): its
    every cell is what :func:`student_version` makes of it, a solution cell holding the stub
    already counting as released."""
    try:
        released = student_version(nb)
    except NotebookError:  # malformed markers: whatever it is, not a clean release
        return True
    for cell, student in zip(nb.cells, released.cells):
        if cell.source != student.source and not (is_solution(cell) and _is_stub(cell)):
            return True
    return False


def _is_stub(cell: Cell) -> bool:
    """A solution cell that holds nbgrader's stub (at any indent) where its solution was."""
    stub = CODE_STUB if cell.cell_type == "code" else TEXT_STUB
    lines = {line.strip() for line in str(cell.source).split("\n")}
    return all(line.strip() in lines for line in stub.split("\n"))


def _lock(cell: Cell) -> None:
    """nbgrader's LockCells: test and read-only cells cannot be edited, none of them deleted."""
    if is_solution(cell):
        cell.metadata["deletable"] = False
    elif is_grade(cell) or is_locked(cell):
        cell.metadata["deletable"] = False
        cell.metadata["editable"] = False


def released_answers(nb: Notebook) -> dict[str, str]:
    """grade_id -> source of each graded solution cell as released to students."""
    try:
        released = student_version(nb)
    except NotebookError:
        return {}
    return {str(grade_id(c)): c.source for c in released.cells if is_solution(c) and is_grade(c)}


def released_checksums(nb: Notebook) -> dict[str, str]:
    """grade_id -> nbgrader checksum of each graded solution cell as released to students."""
    try:
        released = student_version(nb)
    except NotebookError:
        return {}
    return {str(grade_id(c)): str(nbgrader(c)["checksum"]) for c in released.cells
            if is_solution(c) and is_grade(c) and "checksum" in nbgrader(c)}


# --------------------------------------------------------------------------- scoring


def classify(cell: Cell) -> GradedCell | None:
    """The graded cell a source cell is, or None (ungraded, or judged by a Part's check())."""
    gid = grade_id(cell)
    if gid is None:
        return None
    meta = nbgrader(cell)
    if is_grade(cell):
        if cell.cell_type == "code" and not is_solution(cell):
            if check_calls(str(cell.get("source", ""))):
                return None  # a Part's test cell
            return GradedCell(gid, points(cell), "tests")
        return GradedCell(gid, points(cell), "answer")
    if meta.get("task"):
        return GradedCell(gid, float(meta.get("points", 0.0) or 0.0), "task")
    return None


def partial_grade(text: Any, max_points: float) -> float:
    """nbgrader's get_partial_grade on an execute_result's text/plain."""
    if not text:
        raise PartialCreditError("the cell's result has no text/plain")
    if isinstance(text, list):
        if len(text) > 1:
            return max_points
        text = text[0]
    try:
        grade = float(text)
    except (ValueError, TypeError):
        return max_points
    if grade >= 0.0:
        if grade > max_points:
            raise PartialCreditError(f"partial credit {grade:g} is greater than the cell's "
                                     f"{max_points:g} points")
        return grade
    return max_points  # negative or NaN: nbgrader gives full credit (with a warning)


def determine_grade(cell: Cell, max_points: float, released_checksum: str | None
                    ) -> float | None:
    """nbgrader's determine_grade: points, or None where a person must grade.

    ``cell`` carries the source's nbgrader flags (restored); ``released_checksum`` is the
    checksum of the cell in the student version (what OverwriteCells writes back)."""
    if is_solution(cell):
        if released_checksum is not None and released_checksum == checksum(cell):
            return 0.0
        return None
    if cell.get("cell_type") == "code":
        for output in cell.get("outputs", []):
            kind = output.get("output_type")
            if kind == "error" or (kind == "stream" and output.get("name") == "stderr"):
                return 0.0
            if kind == "execute_result":
                data = output.get("data")
                if not isinstance(data, dict):
                    return max_points
                return partial_grade(data.get("text/plain"), max_points)
        return max_points
    return None
