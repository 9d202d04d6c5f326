"""The instructor's side of a batch: the source notebooks, the files beside them, the parts.

Everything here is trusted (it lies beside ``--source``) and is read before any sandbox runs: a
part file imported later could have been written by a sandbox in the meantime.
"""

from __future__ import annotations

import fnmatch
import hashlib
import io
import math
import os
import re
import types
from collections import ChainMap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import cloudpickle
from cloudpickle.cloudpickle import _code_reduce  # the reducer the path-free one wraps

from edu_dl.grading.authoring import parts as package
from edu_dl.grading.authoring import rubric
from edu_dl.grading.authoring.spec import Part, plain_call
from edu_dl.grading.model import Budget, Exercise, NothingToGrade, Refused
from edu_dl.grading.nbgrader import (
    check_calls,
    classify,
    grade_id,
    is_solution,
    released_answers,
    released_checksums,
    withholds,
)
from edu_dl.grading.notebooks import read_notebook
from edu_dl.grading.settings import MB, Settings
from edu_dl.grading.trust.bounded import read_bounded
from edu_dl.speed.tasks import TASKS, speed_row


def load_source(source: Path, exclude: tuple[Path, ...] = (), settings: Settings | None = None,
                log: Callable[[str], None] = print) -> dict[str, Exercise]:
    """The exercises of the source folder, by notebook name (e.g. '08_autograd_from_scratch'):
    every notebook with at least one graded cell (a check() test, an nbgrader test cell, a
    graded answer or a task). The names beside it that start with a dot (.git, .env, ...) are
    listed in one line of ``log``: they never reach a sandbox."""
    if not source.exists():
        raise NothingToGrade(f"{source}: no such folder or notebook; pass the folder of "
                             "source notebooks (with their solutions and hidden tests) as "
                             "--source")
    paths = sorted(p for p in source.glob("*.ipynb")) if source.is_dir() else [source]
    if not paths:
        raise NothingToGrade(f"{source}: no source notebooks (*.ipynb) here; pass the folder "
                             "that holds the assignment's source notebooks as --source (for "
                             "an nbgrader course: source/<assignment>/)")
    exercises = {}
    settings = settings or Settings()
    dotted: list[str] = []
    beside = read_beside(source if source.is_dir() else source.parent, exclude,
                         settings.beside_files, settings.beside_mb, dotted)
    if dotted:
        log(f"not copied into the sandboxes (names that start with a dot stay beside the "
            f"source): {', '.join(dotted)}")
    for path in paths:
        nb = read_notebook(path)
        ex = Exercise(path.stem, nb, hashlib.sha256(path.read_bytes()).hexdigest())
        ex.budget = read_budget(nb, path)
        ex.package = read_package_name(nb, path)
        try:
            ex.rubrics = rubric.of_notebook(nb, path.name)
        except rubric.RubricError as exc:
            raise NothingToGrade(str(exc)) from None
        for cell in nb.cells:
            gid = grade_id(cell)
            if gid is not None and cell.cell_type == "code":
                for part_id in dict.fromkeys(check_calls(cell.source)):
                    if all(part_id != p for p, _ in ex.parts):
                        ex.parts.append((part_id, gid))
            graded = classify(cell)
            if graded is not None and all(graded.grade_id != c.grade_id for c in ex.cells):
                ex.cells.append(graded)
        if ex.parts or ex.cells:
            ex.checksums = released_checksums(nb)
            ex.released = released_answers(nb)
            exercises[ex.name] = ex
    # The students' own packages come from their submissions: the instructor's copy beside the
    # source (a reference implementation: an oracle) reaches no sandbox.
    packages = {ex.package for ex in exercises.values() if ex.package}
    left_out = sorted({name.split("/")[0] for name in beside} & packages)
    if left_out:
        log("not copied into the sandboxes (each student's own comes from their submission): "
            + ", ".join(f"{name}/" for name in left_out))
    beside = {name: data for name, data in beside.items() if name.split("/")[0] not in packages}
    for ex in exercises.values():
        ex.files = beside
    if not exercises:
        raise NothingToGrade(f"{source}: none of its {len(paths)} notebook(s) has a graded "
                             "cell; mark test cells, graded answers or tasks with nbgrader's "
                             "metadata (grade: true, a grade_id and points) and grade again")
    return exercises


BUDGET_FIELDS = {"points", "cpu_s", "memory_mb"}
BUDGET_EXAMPLE = '{"edu_dl": {"budget": {"points": 2, "cpu_s": 60, "memory_mb": 1024}}}'


def read_budget(nb: Any, path: Path) -> Budget | None:
    """The notebook's budget (its metadata ``edu_dl.budget``: points, and CPU seconds and/or
    peak MB for one run of the whole notebook), or None; NothingToGrade, naming the notebook
    and the field, when it is malformed."""
    meta = nb.metadata.get("edu_dl", {})
    raw = meta.get("budget") if isinstance(meta, dict) else None
    if raw is None:
        return None

    def refuse(problem: str) -> NothingToGrade:
        return NothingToGrade(f"{path.name}: its metadata edu_dl.budget {problem}; write it as "
                              f"{BUDGET_EXAMPLE} (either limit may be left out, not both)")

    if not isinstance(raw, dict):
        raise refuse(f"is a {type(raw).__name__}, not an object")
    unknown = sorted(set(raw) - BUDGET_FIELDS)
    if unknown:
        raise refuse(f"has unknown fields {', '.join(map(repr, unknown))}")
    values: dict[str, float] = {}
    for name, value in raw.items():
        least = "0 or more" if name == "points" else "above 0"
        number = isinstance(value, int | float) and not isinstance(value, bool)
        if not number or not math.isfinite(value) or value < 0 or (value == 0 and name != "points"):
            raise refuse(f"has {name}={value!r}: a number, {least}")
        values[name] = float(value)
    if "points" not in values:
        raise refuse("has no points")
    if not {"cpu_s", "memory_mb"} & set(values):
        raise refuse("has neither cpu_s nor memory_mb: nothing to judge")
    return Budget(values["points"], values.get("cpu_s"), values.get("memory_mb"))


# A package name: a Python identifier that shadows none of what the sandbox's notebook imports
# from its folder or the course (parts/, edu_dl).
PACKAGE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
RESERVED_PACKAGES = frozenset({"parts", "edu_dl", "notebook"})
PACKAGE_EXAMPLE = '{"edu_dl": {"package": "mytorch"}}'


def read_package_name(nb: Any, path: Path) -> str:
    """The student's own package the notebook imports (its metadata ``edu_dl.package``), or '';
    NothingToGrade, naming the notebook, when it is not a plain package name."""
    meta = nb.metadata.get("edu_dl", {})
    name = meta.get("package") if isinstance(meta, dict) else None
    if name is None:
        return ""
    if not isinstance(name, str) or not PACKAGE_NAME.fullmatch(name) or \
            name in RESERVED_PACKAGES:
        raise NothingToGrade(f"{path.name}: its metadata edu_dl.package is {name!r}, not the "
                             f"name of a package a student writes (a Python identifier, not "
                             f"{', '.join(sorted(RESERVED_PACKAGES))}); write it as "
                             f"{PACKAGE_EXAMPLE}")
    return name


def refuse_released(exercises: list[Exercise], source: Path) -> None:
    """NothingToGrade when a source notebook to grade against is a student version (what
    ``edu-dl assign`` releases, such as exercises/): it has no solution and no hidden test to
    withhold, so a grade against it would check the visible cases only."""
    released = sorted({ex.name for ex in exercises
                       if any(is_solution(c) for c in ex.notebook.cells)
                       and not withholds(ex.notebook)})
    if released:
        names = ", ".join(f"{name}.ipynb" for name in released)
        what = "is a student version" if len(released) == 1 else "are student versions"
        raise NothingToGrade(
            f"--source {source}: {names} {what} (no solutions, no hidden tests: edu-dl "
            "assign would release it unchanged), so pass the instructor's source notebooks "
            "instead, the folder the exercises were made from (e.g. --source solutions/)")


# Files beside the source notebooks (data, images) reach each submission's sandbox read-only, next
# to the notebook; what nbgrader's CourseDirectory.ignore skips does not, nor notebooks (other
# exercises' sources), nor the instructor's part specs (parts/), nor links or special files, nor
# any name that starts with a dot (.git with the whole history, .env, checkpoints).
NBGRADER_IGNORE = (".ipynb_checkpoints", "*.pyc", "__pycache__", "feedback")
# What Jupyter (checkpoints, the language server's copies) and Colab (.config) make beside a
# notebook: never anyone's data, so never worth the line about dotted names left out.
TOOL_FOLDERS = frozenset({".ipynb_checkpoints", ".virtual_documents", ".config"})
PARTS_FOLDER = "parts"
MAX_BESIDE_DEPTH = 8


def read_beside(folder: Path, exclude: tuple[Path, ...] = (),
                max_files: int = Settings.beside_files, max_mb: float = Settings.beside_mb,
                dotted: list[str] | None = None) -> dict[str, bytes]:
    """The files beside the source notebooks, by path relative to ``folder``, read bounded and
    never through a link; NothingToGrade when there are more than ``max_files`` or more than
    ``max_mb`` in all (``--max-beside-files``, ``--max-beside-mb``). ``exclude``: folders never
    read, wherever they lie (the submissions, the grades). ``dotted`` collects the names left
    out because they start with a dot (a folder with a trailing /)."""
    skip = {p.resolve() for p in exclude}
    found: dict[str, bytes] = {}
    total, todo = 0, [(folder, 0)]
    while todo:
        here, depth = todo.pop()
        with os.scandir(here) as it:
            entries = sorted(it, key=lambda e: e.name)
        for entry in entries:
            if entry.name.startswith("."):
                if dotted is not None and entry.name not in TOOL_FOLDERS:
                    relative = Path(entry.path).relative_to(folder).as_posix()
                    dotted.append(relative + ("/" if entry.is_dir(follow_symlinks=False) else ""))
                continue
            if any(fnmatch.fnmatch(entry.name, pattern) for pattern in NBGRADER_IGNORE) or \
                    entry.is_symlink() or entry.name.endswith(".ipynb") or \
                    (depth == 0 and entry.name == PARTS_FOLDER):
                continue
            path = Path(entry.path)
            if entry.is_dir(follow_symlinks=False):
                if depth < MAX_BESIDE_DEPTH and path.resolve() not in skip:
                    todo.append((path, depth + 1))
                continue
            if not entry.is_file(follow_symlinks=False):
                continue
            if len(found) >= max_files:
                raise NothingToGrade(f"{folder}: over {max_files} files beside the "
                                     "source notebooks (each reaches every sandbox); move "
                                     "what the notebooks do not read out of the source folder, "
                                     "or raise --max-beside-files")
            left = int(max_mb * MB) - total
            try:
                data = read_bounded(path, left, f"left of the {max_mb:g} MB that the "
                                       "files beside the source notebooks may hold in all "
                                       "(--max-beside-mb)")
            except Refused as exc:
                raise NothingToGrade(f"{folder}: {exc}; move what the notebooks do not read "
                                     "out of the source folder") from None
            total += len(data)
            found[path.relative_to(folder).as_posix()] = data
    return found


def load_parts(exercises: dict[str, Exercise], source: Path | None = None) -> None:
    """Import every part the source checks, before any submission runs: the grader trusts only
    code it loaded while no sandbox had yet run (a missing part fails here, loudly). The
    parts beside ``source`` (parts/<exercise>.py and its private half
    parts/<exercise>.private.py), the course's own as an instructor's."""
    import IPython.core.inputtransformer2  # noqa: F401  (trust/source.py reads cells with it)

    folder = source if source is None or source.is_dir() else source.parent
    needed = {part_id.split(".")[0] for ex in exercises.values() for part_id, _ in ex.parts}
    try:
        course = package.course_parts(folder, needed) if folder is not None else {}
    except KeyError as exc:
        raise NothingToGrade(str(exc.args[0]) if exc.args else str(exc)) from None
    files = package.part_files(folder) if folder is not None else {}
    for ex in exercises.values():
        h = hashlib.sha256()
        for part_id, _ in ex.parts:
            try:
                ex.specs[part_id] = part = package.get(part_id, course)
            except KeyError as exc:
                raise NothingToGrade(f"{ex.name}: {exc.args[0]}; define the part in "
                                     f"{package.FOLDER}/<exercise>.py beside the source "
                                     "notebook") from None
            ex.points[part_id] = float(part.points)
            call = pickled_call(part)
            if call is not None:
                ex.calls[part_id] = call
            task = TASKS.get(part_id)
            if task is not None:  # its speed is a row of its own, measured after the run
                ex.speed[speed_row(part_id)] = task.points
                h.update(repr((task.goal, task.points, task.calls, task.rtol, task.atol))
                         .encode())
            exercise = part_id.split(".")[0]
            for path in files.get(exercise, []):
                h.update(path.name.encode() + b"\0" + path.read_bytes())
        ex.specs_digest = h.hexdigest()


def pickled_call(part: Part) -> bytes | None:
    """A part's own ``call=`` by value, for the sandbox (None: it has none, fn(*args)); the
    part file itself never goes there. cloudpickle sends a part file's functions by value:
    no sandbox could import them. Their code carries no host path (a private part file's
    folder is the instructor's business): every code object's file name is the part's id."""
    if part.call is plain_call:
        return None
    buffer = io.BytesIO()
    try:
        _PathlessPickler(buffer, f"<part {part.id}>").dump(part.call)
    except Exception as exc:
        raise NothingToGrade(f"{part.id}: its call= cannot be sent to the sandbox "
                             f"({type(exc).__name__}: {exc}); use plain functions and "
                             "data in it") from None
    return buffer.getvalue()


class _PathlessPickler(cloudpickle.Pickler):
    """cloudpickle, with each code object's co_filename replaced before it is written."""

    def __init__(self, file: io.BytesIO, filename: str) -> None:
        def without_path(code: types.CodeType) -> Any:
            return _code_reduce(code.replace(co_filename=filename))

        # Set before the pickler's __init__, which is when the C pickler reads it.
        self.dispatch_table = ChainMap({types.CodeType: without_path},
                                       cloudpickle.Pickler.dispatch_table)
        super().__init__(file, protocol=cloudpickle.DEFAULT_PROTOCOL)
        self.filename = filename

    def _function_getnewargs(self, func: types.FunctionType) -> Any:
        """cloudpickle's, with the module's ``__file__`` (kept for relative imports) replaced."""
        code, base_globals, *rest = super()._function_getnewargs(func)
        if "__file__" in base_globals:  # this pickler's own copy of the module's names
            base_globals["__file__"] = self.filename
        return (code, base_globals, *rest)
