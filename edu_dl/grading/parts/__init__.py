"""The graded parts: the course's in this package, an instructor's beside their source notebooks.

The course's: one module per exercise, ``parts/ex05.py`` holds every ``ex05.*`` part, imported
only when a check first needs it. An instructor's own, without touching the package: in the
assignment's source folder, ``parts/<exercise>.py`` (the public half: shipped with the student
version by ``edu-dl assign``, so ``check()`` answers at once) and, optionally,
``parts/<exercise>.private.py`` (the private half: hidden cases, the real oracle), which stays
beside ``--source``. Either defines a list ``PARTS`` of :class:`edu_dl.grading.Part` whose ids
start with ``<exercise>.``; a private part replaces the public part with the same id. The grader
loads both, before any submission runs (:func:`course_parts`); no part file reaches a sandbox.
"""

from __future__ import annotations

import importlib
import importlib.util
import pkgutil
from collections.abc import Mapping
from pathlib import Path

from ..protocol import EXERCISE_NAME, PART_ID
from ..spec import Part

FOLDER = "parts"  # beside the source notebooks, and beside the student's
PRIVATE = ".private.py"


def get(part_id: str, course: Mapping[str, Part] | None = None, *, local: bool = False
        ) -> Part:
    """The Part with this id: from ``course`` (the instructor's, loaded by the grader), else the
    package's module, else, with ``local`` only (a student's check(): the working folder is the
    notebook's), ``./parts/<exercise>.py`` and its private half where present. The grader and
    assign never look in the working folder: it may be anyone's. KeyError naming the known
    parts when there is none."""
    if course is not None and part_id in course:
        return course[part_id]
    match = PART_ID.match(part_id)
    if match is None:
        raise KeyError(f"{part_id!r} is not a part id: expected '<exercise>.<name>', e.g. "
                       "'ex05.relu_backward' or 'hw1.squares'")
    exercise = match.group(1)
    module_name = f"{__name__}.{exercise}"
    try:
        found = list(importlib.import_module(module_name).PARTS)
        where = module_name
    except ModuleNotFoundError as exc:
        if exc.name != module_name:
            raise
        here = Path.cwd() / FOLDER
        found = list(_folder_parts(here, exercise).values()) if local else []
        where = f"{here}/{exercise}.py"
        if not found:
            raise KeyError(f"no exercise {exercise!r}: no module {module_name} and no "
                           f"{FOLDER}/{exercise}.py beside the notebook") from None
    for part in found:
        if part.id == part_id:
            return part
    known = ", ".join(part.id for part in found)
    raise KeyError(f"no part {part_id!r} in {where} (it has: {known})")


def _load(path: Path, exercise: str) -> list[Part]:
    """PARTS of one part file, each checked to be a Part of ``exercise``."""
    name = f"edu_dl_course_parts.{exercise}{'_private' if path.name.endswith(PRIVATE) else ''}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise KeyError(f"{path}: cannot be loaded as Python")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    parts = getattr(module, "PARTS", None)
    if not isinstance(parts, list | tuple) or not all(isinstance(p, Part) for p in parts):
        raise KeyError(f"{path}: must define PARTS, a list of edu_dl.grading.Part")
    wrong = [p.id for p in parts if PART_ID.match(p.id) is None
             or not p.id.startswith(f"{exercise}.")]
    if wrong:
        raise KeyError(f"{path}: part id(s) {', '.join(wrong)} must read '{exercise}.<name>'")
    return list(parts)


def _folder_parts(folder: Path, exercise: str) -> dict[str, Part]:
    """The exercise's parts in ``folder``: the public file's, then the private file's over them."""
    found: dict[str, Part] = {}
    for path in (folder / f"{exercise}.py", folder / f"{exercise}{PRIVATE}"):
        if path.is_file() and not path.is_symlink():
            found.update((p.id, p) for p in _load(path, exercise))
    return found


def part_files(source: Path) -> dict[str, list[Path]]:
    """The part files beside a source folder, by exercise: [public, private] where present."""
    folder = source / FOLDER
    files: dict[str, list[Path]] = {}
    if not folder.is_dir():
        return files
    for path in sorted(folder.glob("*.py")):
        exercise = path.name.removesuffix(PRIVATE).removesuffix(".py")
        if EXERCISE_NAME.fullmatch(exercise) and path.is_file() and not path.is_symlink():
            files.setdefault(exercise, []).append(path)
    return files


def course_parts(source: Path) -> dict[str, Part]:
    """Every part an instructor defines beside ``source`` (a folder of source notebooks), the
    private halves over the public ones: what the grader judges with."""
    found: dict[str, Part] = {}
    for exercise in part_files(source):
        found.update(_folder_parts(source / FOLDER, exercise))
    return found


def modules() -> list[str]:
    """The exercise modules present: ['ex02', 'ex05', ...]."""
    return sorted(m.name for m in pkgutil.iter_modules(__path__)
                  if EXERCISE_NAME.fullmatch(m.name))


def all_parts() -> list[Part]:
    """Every part of every exercise module, in module order."""
    return [part for name in modules()
            for part in importlib.import_module(f"{__name__}.{name}").PARTS]
