"""nbgrader compatibility, proven once: nbgrader 0.9's own generate_assignment on a solutions
notebook gives the same student version as `edu-dl assign`.

nbgrader cannot share the course venv without conflicts, so it is installed into a separate venv
under pytest's cache folder (one minute the first time; reused afterwards). No network or no
nbgrader means this test FAILS: the compatibility claim is then unproven.

What is compared: the whole file, byte for byte (cell sources, cell ids, outputs, nbgrader's
metadata with its checksums and `cell_type`, the lock flags `deletable`/`editable`). On a
mismatch the message lists the differing cells and fields. The known differences in kind:
`edu-dl assign` also drops nbclient's `execution` timing metadata, which our executed solutions do
not carry (they are executed with record_timing=False), and the notebook's `edu_dl` metadata (the
digest of the code that executed the solution, see edu_dl.notebook.run), which nbgrader keeps:
the test removes that key from nbgrader's version, and only that key, before comparing.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import nbformat
import pytest
from fixtures.nbgrader_course import nbgrader_venv

from edu_dl.grading.nbgrader import STUDENT_METADATA
from edu_dl.grading.term.assign import assign

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "solutions" / "08_autograd_from_scratch.ipynb"
def cell_differences(ours: Path, theirs: Path) -> list[str]:
    a, b = nbformat.read(ours, as_version=4), nbformat.read(theirs, as_version=4)
    problems = [] if a.metadata == b.metadata else ["notebook metadata differs"]
    if len(a.cells) != len(b.cells):
        problems.append(f"{len(a.cells)} cells vs nbgrader's {len(b.cells)}")
    for index, (x, y) in enumerate(zip(a.cells, b.cells)):
        for key in sorted(set(x) | set(y)):
            if x.get(key) != y.get(key):
                problems.append(f"cell {index} {key}: ours {x.get(key)!r} vs nbgrader "
                                f"{y.get(key)!r}")
    return problems


@pytest.mark.slow
def test_nbgrader_generate_assignment_gives_the_same_student_version(request, tmp_path: Path):
    bin_dir = nbgrader_venv(Path(request.config.cache.mkdir("nbgrader-0.9-venv")))
    course = tmp_path / "course"
    (course / "source" / "ps").mkdir(parents=True)
    shutil.copy(NOTEBOOK, course / "source" / "ps" / NOTEBOOK.name)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "PYTHON"))}
    run = subprocess.run([str(bin_dir / "nbgrader"), "generate_assignment", "ps", "--no-db",
                          "--force"], cwd=course, capture_output=True, text=True, timeout=300,
                         env=env, check=False)
    assert run.returncode == 0, run.stdout + run.stderr
    theirs = course / "release" / "ps" / NOTEBOOK.name
    released = nbformat.read(theirs, as_version=4)
    assert "edu_dl" in released.metadata  # nbgrader keeps the execution digest ...
    kept = {key: value for key, value in released.metadata.pop("edu_dl").items()
            if key in STUDENT_METADATA}  # ... which an exercise does not carry (its package's
    if kept:  # name it does)
        released.metadata["edu_dl"] = kept
    nbformat.write(released, theirs)

    ours_dir = tmp_path / "ours"
    assign(NOTEBOOK, ours_dir)
    ours = ours_dir / NOTEBOOK.name
    assert cell_differences(ours, theirs) == []
    assert ours.read_bytes() == theirs.read_bytes()
