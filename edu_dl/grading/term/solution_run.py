"""``edu-dl assign``'s self-test: each solution notebook graded against its own tests.

As otter assign does, the release is refused when the instructor's own solution does not pass:
each source notebook is graded by :func:`validate.validate` against itself (the sandbox, the
hidden tests and the private parts, as ``edu-dl grade`` grades a student), and every part that
loses points is named with its message. Cells a person grades (answers, tasks) are not judged
here.

A notebook that passed is remembered by a digest of everything its run depends on (the
notebook, the part files and the files beside it, the installed ``edu_dl`` and the Python), in a
cache outside the repository (``$EDU_DL_CACHE``, else ``$XDG_CACHE_HOME/edu-dl``, else
``~/.cache/edu-dl``): running ``assign`` again after editing one notebook runs that one only.
"""

from __future__ import annotations

import functools
import hashlib
import os
import sys
from collections.abc import Callable
from pathlib import Path

from edu_dl.grading.authoring import parts
from edu_dl.grading.settings import GRADER_VERSION, Settings
from edu_dl.grading.stages.load import read_beside

CACHE_VAR = "EDU_DL_CACHE"
PASSED = "solutions-passed"
TIMEOUT_S = 120.0  # per cell, as edu-dl validate's default


def cache_dir() -> Path:
    """Where passing runs are remembered (never inside the course's folder)."""
    if os.environ.get(CACHE_VAR):
        return Path(os.environ[CACHE_VAR])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "edu-dl"


@functools.lru_cache(maxsize=1)
def _package_digest() -> str:
    """The installed edu_dl's Python files: a changed grader or library runs everything again."""
    root = Path(__file__).resolve().parents[1]
    h = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        h.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes())
    return h.hexdigest()


def run_key(notebook: Path) -> str:
    """A digest of everything the solution's run depends on."""
    folder = notebook.parent
    h = hashlib.sha256(f"{GRADER_VERSION}\0{sys.version}\0{TIMEOUT_S}\0".encode())
    h.update(_package_digest().encode())
    h.update(notebook.read_bytes())
    for group in parts.part_files(folder).values():
        for path in group:
            h.update(path.name.encode() + b"\0" + path.read_bytes())
    for name, data in sorted(read_beside(folder).items()):
        h.update(hashlib.sha256(name.encode() + b"\0" + data).digest())
    return h.hexdigest()


def failures(notebook: Path, progress: bool = False, without_sandbox: str = "") -> list[str]:
    """What fails when the solution notebook is graded against itself; [] when it passes.
    Without the sandbox: NoSandbox, unless ``without_sandbox`` (``--no-sandbox``)."""
    from edu_dl.grading.term.validate import validate

    report = validate(notebook, timeout=TIMEOUT_S, progress=progress, source=notebook,
                      log=lambda _: None, without_sandbox=without_sandbox)
    found = [f"{notebook.name}: part {p.part_id} scores {p.points:g} of {p.max_points:g}: "
             + (p.message.splitlines() or [""])[0]
             for p in report.parts if not p.ok and not p.by_hand]
    found += [f"{notebook.name}: {error.splitlines()[0]}" for error in report.errors]
    if not report.parts and not report.errors:
        found.append(f"{notebook.name}: no graded test cell ran")
    return found


def check_solutions(notebooks: list[Path], log: Callable[[str], None] = print,
                    cache: Path | None = None, without_sandbox: str = "") -> list[str]:
    """Grade each solution notebook against its own tests (skipping those that passed with the
    same key before); every failure, one line each, naming the notebook and the part.

    Fails closed: raises NoSandbox, before anything runs, where the sandbox cannot be built
    and ``without_sandbox`` (``--no-sandbox``) does not allow the fallback."""
    Settings(without_sandbox=without_sandbox).checked()
    cache = (cache or cache_dir()) / PASSED
    problems: list[str] = []
    for notebook in notebooks:
        key = run_key(notebook)
        if (cache / key).is_file():
            log(f"{notebook.name}: the solution passed its tests before (unchanged since)")
            continue
        found = failures(notebook, without_sandbox=without_sandbox)
        problems += found
        if not found:
            log(f"{notebook.name}: the solution passes its tests (hidden ones included)")
            try:
                cache.mkdir(parents=True, exist_ok=True)
                (cache / key).write_text(f"{notebook.resolve()}\n")
            except OSError as exc:  # no cache: the next run runs it again
                log(f"could not remember that {notebook.name} passed ({exc})")
    return problems
