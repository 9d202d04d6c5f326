"""solutions/ -> exercises/: the student version of every notebook, as nbgrader would release it.

The release itself is nbgrader's (``nbgrader.student_version``); here: the authoring mistakes
that nbgrader would accept but our grading would not (``lint``), and the files written.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from edu_dl.grading import nbgrader as nbg
from edu_dl.grading.authoring import parts, release, rubric
from edu_dl.grading.authoring.hints import Mistake
from edu_dl.grading.authoring.spec import Part
from edu_dl.grading.model import NothingToGrade
from edu_dl.grading.nbgrader import AssignError, student_version
from edu_dl.grading.notebooks import (
    Cell,
    Notebook,
    NotebookError,
    notebook_bytes,
    read_notebook,
    write_atomic,
)
from edu_dl.grading.settings import Settings
from edu_dl.grading.stages.load import read_beside, read_package_name


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
        try:
            rubric.read(cell, f"{where}: cell {index} ({nbg.grade_id(cell) or 'no grade_id'})")
        except rubric.RubricError as exc:
            problems.append(str(exc))
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


def students_packages(notebooks: Mapping[Path, Notebook]) -> set[str]:
    """The packages the students write (the notebooks' metadata ``edu_dl.package``); AssignError
    naming the notebook where one is not a package's name."""
    try:
        return {name for path, nb in notebooks.items() if (name := read_package_name(nb, path))}
    except NothingToGrade as exc:
        raise AssignError(str(exc)) from None


def student_package(files: Mapping[str, bytes]) -> dict[str, bytes] | None:
    """The release of a students' package (its files by path beside the source, 'mytorch/nn.py'):
    every ``.py`` file with its solution regions stubbed (``student_module``), the others as
    they are; None where no file marks a region: then the package is an answer, never released.
    AssignError naming the file for a region that is not closed."""
    released: dict[str, bytes] = {}
    regions = 0
    for path, data in files.items():
        if not path.endswith(".py"):
            released[path] = data
            continue
        try:
            text, found = nbg.student_module(data.decode("utf-8"), path)
        except (UnicodeDecodeError, NotebookError) as exc:
            raise AssignError(f"{path}: {exc}") from None
        released[path] = text.encode("utf-8")
        regions += found
    return released if regions else None


def assign(source: str | Path, dest: str | Path, write: bool = True,
           dotted: list[str] | None = None, warnings: list[str] | None = None,
           run_solutions: bool = False, log: Callable[[str], None] | None = None,
           without_sandbox: str = "") -> list[Path]:
    """Write the student version of every notebook of ``source`` into ``dest``.

    Returns the paths whose content changed (with ``write=False``: that would change, i.e. the
    stale ones). Raises AssignError listing every authoring problem before writing anything.
    ``dotted`` collects the names beside the source left out because they start with a dot
    (.git, .env: never released); ``warnings`` what the release could not carry or should not
    (a hint that is code, an oracle in a public part file that ships). ``run_solutions``:
    first grade each solution notebook against its own tests in the sandbox
    (``solution_run``) and refuse, naming each failing part, unless all pass; ``log`` hears
    which ran; where the sandbox cannot be built that raises NoSandbox before anything runs,
    unless ``without_sandbox`` (``--no-sandbox``).
    """
    source, dest = Path(source), Path(dest)
    warnings = [] if warnings is None else warnings
    if run_solutions:  # fails closed before a part file is imported (its bytecode written)
        Settings(without_sandbox=without_sandbox).checked()
    paths = source_notebooks(source)
    if not paths:
        raise AssignError(f"{source}: no .ipynb notebooks")
    notebooks = {path: read_notebook(path) for path in paths}
    outputs: dict[Path, bytes] = {}
    problems: list[str] = []
    folder = source if source.is_dir() else source.parent
    try:
        course = parts.course_parts(folder)
    except KeyError as exc:
        raise AssignError(str(exc.args[0]) if exc.args else str(exc)) from None
    if source.is_dir():  # the files beside the notebooks (data, images), as nbgrader copies them
        inside = dest.resolve().relative_to(folder.resolve()).as_posix() \
            if dest.resolve().is_relative_to(folder.resolve()) else None
        # The students' own packages: each writes theirs; the instructor's is an answer.
        own = students_packages(notebooks)
        packages: dict[str, dict[str, bytes]] = {name: {} for name in own}
        for name, data in read_beside(folder, dotted=dotted).items():
            if name.split("/")[0] in own:
                packages[name.split("/")[0]][name] = data
            elif inside is None or not (name + "/").startswith(inside + "/"):
                outputs[dest / name] = data
        for name, files in sorted(packages.items()):
            released = student_package(files)
            if released is None:
                warnings.append(f"{name}/ beside the source is not released: it is the package "
                                "each student writes (metadata edu_dl.package), yours answers "
                                "it, and it marks no solution region to release it stubbed")
            else:
                outputs.update({dest / path: data for path, data in released.items()})
    checked: set[str] = set()
    for path, nb in notebooks.items():
        found = lint(nb, str(path), course)
        problems += found
        if not found:
            student = student_version(nb, str(path))
            checked |= {part_id for cell in student.cells if cell.cell_type == "code"
                        for part_id in nbg.check_calls(cell.source)}
            outputs[dest / path.name] = notebook_bytes(student)
    if problems:
        raise AssignError("\n".join(problems))
    outputs.update(_releases(folder, dest, course, checked, warnings))
    if run_solutions:
        from edu_dl.grading.term.solution_run import check_solutions

        failed = check_solutions(paths, log or print, without_sandbox=without_sandbox)
        if failed:
            raise AssignError("a solution fails its own tests (fix it, or pass "
                              "--no-run-solutions to release anyway):\n" + "\n".join(failed))
    changed = [p for p, data in outputs.items() if not _current(p, data)]
    if write:
        for path in changed:
            write_atomic(path, outputs[path])
    return changed


def _current(path: Path, data: bytes) -> bool:
    """Whether ``path`` already holds ``data`` (a release: the same data, floats to 1e-9)."""
    if not path.is_file():
        return False
    old = path.read_bytes()
    return old == data or (path.suffix == release.SUFFIX and release.same(old, data))


def _releases(folder: Path, dest: Path, course: Mapping[str, Part], checked: set[str],
              warnings: list[str]) -> dict[Path, bytes]:
    """What check() needs in the student version, per exercise: its release (data only: the
    visible cases of the parts the released notebooks check, their expected results, each
    hint's values), and the public part file only where the release names code in it."""
    outputs: dict[Path, bytes] = {}
    for exercise, files in parts.part_files(folder).items():
        shipped = [part for part_id, part in course.items()
                   if part_id.startswith(f"{exercise}.") and part_id in checked]
        if not shipped:
            continue
        try:
            data, found, names_public = release.freeze(shipped, exercise)
        except release.FreezeError as exc:
            raise AssignError(f"{parts.FOLDER}/{exercise}: {exc}") from None
        warnings += [f"{parts.FOLDER}/{exercise}: {w}" for w in found]
        outputs[dest / parts.FOLDER / f"{exercise}{release.SUFFIX}"] = data
        public = [f for f in files if f.name == f"{exercise}.py"]
        if names_public and public:
            outputs[dest / parts.FOLDER / public[0].name] = public[0].read_bytes()
            warnings += oracles_in_public(public[0], exercise, course)
    return outputs


def oracles_in_public(public: Path, exercise: str, course: Mapping[str, Part]) -> list[str]:
    """Functions of a public part file that ships which compute answers: a part's oracle
    (``expected=``), its case generator (hidden cases included) or a mistake replay."""
    found: list[str] = []
    for part in course.values():
        if not part.id.startswith(f"{exercise}."):
            continue
        uses: list[tuple[str, Any]] = [("its oracle (expected=)", part.expected),
                                       ("its cases (cases=)", part.cases)]
        uses += [("a mistake replay", h.replay) for h in part.hints
                 if isinstance(h, Mistake)]
        for role, fn in uses:
            code = getattr(fn, "__code__", None)
            if code is not None and Path(code.co_filename).resolve() == public.resolve():
                found.append(
                    f"{parts.FOLDER}/{public.name}: {getattr(fn, '__name__', fn)} is part "
                    f"{part.id}'s {role} and ships with the student version, because the "
                    "release names code in this file (a call=, compare= or source check): "
                    f"move the answers into {parts.FOLDER}/{exercise}{parts.PRIVATE} (it "
                    f"stays beside the source) and keep only what check() runs in "
                    f"{parts.FOLDER}/{public.name}")
    return found
