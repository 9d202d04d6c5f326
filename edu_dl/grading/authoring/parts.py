"""The graded parts, the course's and an instructor's alike, beside the source notebooks.

One way to write a part: in the assignment's source folder, ``parts/<exercise>.py`` (the public
half: shipped with the student version by ``edu-dl assign``, so ``check()`` answers at once)
and, optionally, ``parts/<exercise>.private.py`` (the private half: hidden cases, the real
oracle), which stays beside ``--source``. Either defines a list ``PARTS`` of
:class:`edu_dl.grading.Part` whose ids start with ``<exercise>.``; a private part replaces the
public part with the same id. The course's own exercises are written so, in
``solutions/parts/`` (and ``exercises/parts/``, generated). The grader loads them before any
submission runs (:func:`course_parts`); no part file reaches a sandbox. A part file may reuse
another's helpers with :func:`sibling`.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import ModuleType

from edu_dl.grading.authoring import release
from edu_dl.grading.authoring.spec import Part
from edu_dl.grading.protocol import EXERCISE_NAME, PART_ID

FOLDER = "parts"  # beside the source notebooks, and beside the student's
PRIVATE = ".private.py"


def get(part_id: str, course: Mapping[str, Part] | None = None, *, local: bool = False
        ) -> Part:
    """The Part with this id: from ``course`` (loaded by the grader from beside ``--source``),
    else, with ``local`` only (a student's check(): the working folder is the notebook's),
    ``./parts/<exercise>.py`` and its private half where present. The grader and assign never
    look in the working folder: it may be anyone's. KeyError naming the known parts when there
    is none."""
    if course is not None and part_id in course:
        return course[part_id]
    match = PART_ID.match(part_id)
    if match is None:
        raise KeyError(f"{part_id!r} is not a part id: expected '<exercise>.<name>', e.g. "
                       "'ex08.relu_backward' or 'hw1.squares'")
    exercise = match.group(1)
    here = Path.cwd() / FOLDER
    found = list(_folder_parts(here, exercise).values()) if local else []
    if course is not None:
        found += [p for p in course.values() if p.id.startswith(f"{exercise}.")]
    if not found:
        where = f"{here}/{exercise}{release.SUFFIX} or {exercise}.py" if local \
            else f"{FOLDER}/{exercise}.py beside the source"
        raise KeyError(f"no exercise {exercise!r}: no {where}")
    for part in found:
        if part.id == part_id:
            return part
    known = ", ".join(part.id for part in found)
    raise KeyError(f"no part {part_id!r} in {FOLDER}/{exercise}.py (it has: {known})")


def sibling(here: str, exercise: str) -> ModuleType:
    """Another part file of the same folder, as a module: how one exercise's parts reuse
    another's helpers (``sibling(__file__, "ex09").loss_hints``). A public half gets a public
    half (it ships); a private half gets another exercise's private half where there is one,
    and its own exercise's public half (``sibling(__file__, "hw1")`` in hw1.private.py)."""
    path = Path(here).resolve()
    own = path.name.removesuffix(PRIVATE).removesuffix(".py")
    private = path.name.endswith(PRIVATE) and exercise != own and \
        (path.parent / f"{exercise}{PRIVATE}").is_file()
    return module(path.parent, exercise, private=private)


def module(folder: Path, exercise: str, private: bool = False) -> ModuleType:
    """The part file ``folder/<exercise>.py`` (``private``: ``<exercise>.private.py``) as a
    module (helpers and PARTS)."""
    return _module(folder / f"{exercise}{PRIVATE if private else '.py'}", exercise)


def _module(path: Path, exercise: str) -> ModuleType:
    """The part file at ``path``, executed once per version of it (a part file is trusted code:
    it lives beside the instructor's source, never in a submission)."""
    private = path.name.endswith(PRIVATE)
    name = f"{release.PUBLIC_MODULE}{exercise}{'_private' if private else ''}"
    stat = path.stat()
    key = (path, stat.st_mtime_ns, stat.st_size)  # an edited file is read again
    loaded = _MODULES.get(key)
    if loaded is not None:
        return loaded
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise KeyError(f"{path}: cannot be loaded as Python")
    fresh = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fresh)
    _MODULES[key] = fresh
    return fresh


# Part files loaded, by path and version. Kept out of sys.modules: a part file is not a module
# anyone imports by name, and two folders may both hold an ex09.py.
_MODULES: dict[tuple[Path, int, int], ModuleType] = {}


def _load(path: Path, exercise: str) -> list[Part]:
    """PARTS of one part file, each checked to be a Part of ``exercise``."""
    # A public half may hold only code that check() runs (call=, compare=, ...): no PARTS.
    parts = getattr(_module(path, exercise), "PARTS", None if path.name.endswith(PRIVATE) else [])
    if not isinstance(parts, list | tuple) or not all(isinstance(p, Part) for p in parts):
        raise KeyError(f"{path}: must define PARTS, a list of edu_dl.grading.Part")
    wrong = [p.id for p in parts if PART_ID.match(p.id) is None
             or not p.id.startswith(f"{exercise}.")]
    if wrong:
        raise KeyError(f"{path}: part id(s) {', '.join(wrong)} must read '{exercise}.<name>'")
    return list(parts)


def _release_parts(path: Path, folder: Path, exercise: str) -> list[Part]:
    """The parts a release archive holds, read once per version of it."""
    stat = path.stat()
    key = (path, stat.st_mtime_ns, stat.st_size)
    if key not in _RELEASES:
        _RELEASES[key] = release.load(path, lambda: module(folder, exercise))
    return _RELEASES[key]


_RELEASES: dict[tuple[Path, int, int], list[Part]] = {}


def _folder_parts(folder: Path, exercise: str) -> dict[str, Part]:
    """The exercise's parts in ``folder``: a release's (``<exercise>.npz``: the student
    version's data), then the public file's over them, then the private file's."""
    found: dict[str, Part] = {}
    frozen = folder / f"{exercise}{release.SUFFIX}"
    if frozen.is_file() and not frozen.is_symlink():
        found.update((p.id, p) for p in _release_parts(frozen, folder, exercise))
    for path in (folder / f"{exercise}.py", folder / f"{exercise}{PRIVATE}"):
        if path.is_file() and not path.is_symlink():
            found.update((p.id, p) for p in _load(path, exercise))
    return found


def part_files(source: Path) -> dict[str, list[Path]]:
    """The part files beside a source folder, by exercise: its release (``.npz``), public
    and private halves, where present."""
    folder = source / FOLDER
    files: dict[str, list[Path]] = {}
    if not folder.is_dir():
        return files
    for path in sorted([*folder.glob("*.py"), *folder.glob(f"*{release.SUFFIX}")]):
        exercise = path.name.removesuffix(PRIVATE).removesuffix(".py").removesuffix(
            release.SUFFIX)
        if EXERCISE_NAME.fullmatch(exercise) and path.is_file() and not path.is_symlink():
            files.setdefault(exercise, []).append(path)
    return files


def course_parts(source: Path, exercises: Iterable[str] | None = None) -> dict[str, Part]:
    """Every part an instructor defines beside ``source`` (a folder of source notebooks), the
    private halves over the public ones: what the grader judges with. ``exercises``: only
    theirs (names such as "ex08"): validating one notebook read the course's 23 releases, 1.6 s
    of its start, for the one it checks."""
    wanted = None if exercises is None else set(exercises)
    found: dict[str, Part] = {}
    for exercise in part_files(source):
        if wanted is None or exercise in wanted:
            found.update(_folder_parts(source / FOLDER, exercise))
    return found
