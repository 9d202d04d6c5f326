"""What the install cell runs on a hosted service, from the course's fresh clone.

The first cell of every notebook (:mod:`edu_dl.notebook.hosted`) clones the course where edu_dl
is missing and calls :func:`install` from this file in that clone. It must run where edu_dl is
not installed yet, so it imports nothing but the standard library.

The service's own torch, TensorFlow and NumPy are handed to pip as constraints: pip keeps them, or
stops with a conflict, but never replaces them. Without TensorFlow the `cpu` extra
(tensorflow-cpu) comes too, which the TensorFlow lecture needs; the `caffe` extra (protobuf 7, for
the Caffe lecture's reader) only where TensorFlow is absent or 2.20 or later, since an older
TensorFlow refuses protobuf 7. An exercise's check() reads the course's part files from `parts/`
beside the notebook, which a hosted service does not have: they are copied there from the clone
(never over an existing `parts/`), and so is the skeleton of the students' own framework,
`mytorch/` (never over an existing one: it holds the student's work).
"""

from __future__ import annotations

import importlib
import re
import shutil
import subprocess
import sys
import tempfile
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

# The service's packages that pip must keep as they are.
KEPT = ("torch", "tensorflow", "tensorflow-cpu", "numpy")


class CourseNotInstalled(Exception):
    """The install failed: one sentence, shown by IPython instead of a traceback."""

    def _render_traceback_(self) -> list[str]:
        return [f"CourseNotInstalled: {self}"]


def kept_versions() -> dict[str, str]:
    """The versions of the service's own torch, TensorFlow and NumPy that are installed."""
    kept = {}
    for name in KEPT:
        try:
            kept[name] = version(name)
        except PackageNotFoundError:
            pass
    return kept


def extras_for(tensorflow: str | None) -> str:
    """The course's extras for a service with this TensorFlow version (None: no TensorFlow)."""
    if tensorflow is None:
        return "[cpu,caffe]"  # TensorFlow for its lecture, protobuf 7 for Caffe's reader
    if tuple(int(n) for n in re.findall(r"\d+", tensorflow)[:2]) >= (2, 20):
        return "[caffe]"
    return ""  # TensorFlow before 2.20 refuses protobuf 7: the Caffe lecture's cells say so


def install(course: str | Path, repository: str) -> None:
    """pip-install the cloned ``course`` with the service's packages kept, then bring the
    exercises' ``parts/`` and ``mytorch/`` beside the notebook; raise CourseNotInstalled when
    pip fails."""
    course = Path(course)
    kept = kept_versions()
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as pins:
        pins.writelines(f"{name}=={v}\n" for name, v in kept.items())
    extra = extras_for(kept.get("tensorflow") or kept.get("tensorflow-cpu"))
    pip = [sys.executable, "-m", "pip", "install", "-c", pins.name, f"{course}{extra}"]
    if subprocess.run(pip).returncode != 0:
        raise CourseNotInstalled(
            f"pip could not install the course from {repository} (its messages are above): "
            "restart the runtime and run this cell again, and if it fails again, report pip's "
            f"last lines at {repository}/issues")
    for beside in ("parts", "mytorch"):  # never over the student's own: mytorch/ is their work
        if not Path(beside).exists() and (course / "exercises" / beside).is_dir():
            shutil.copytree(course / "exercises" / beside, beside)
    importlib.invalidate_caches()
