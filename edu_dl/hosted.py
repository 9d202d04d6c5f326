"""The first cell of every notebook: install the course where it is missing (hosted notebooks).

Colab, Kaggle and other hosted services open a notebook in an environment of their own, with their
own PyTorch, TensorFlow and NumPy, and without edu_dl (the course is not on PyPI). The cell clones
the course's repository (git, one commit deep), installs it from that clone with pip, and hands pip
the versions the service already has as constraints: pip keeps them, or stops with a conflict, but
never replaces them. Without TensorFlow it adds the `cpu` extra (tensorflow-cpu), which the
TensorFlow lecture needs. An exercise's check() reads the course's part files from `parts/` beside
the notebook, which a hosted service does not have: the cell copies the clone's `exercises/parts/`
there (never over an existing `parts/`). Where edu_dl is installed (`make lab`, nbval, the
grader's sandbox) the cell does nothing and prints nothing.

The cell cannot import edu_dl (edu_dl is what is missing), so each notebook holds INSTALL_CELL
whole. `python -m edu_dl.hosted NOTEBOOK...` puts it first in each notebook (or brings an older one
up to date) without executing anything: an executed notebook gets it as execution 1, with no
output (what it prints where the course is installed), and every later count moves up by one, as a
top-to-bottom run with the new cell would number them. Exercises get it from their solutions
through `edu-dl assign`.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import nbformat

REPOSITORY = "https://github.com/edu-dl/edu-dl"
MARK = "# Hosted notebooks (Colab, Kaggle, ...)"
# nbval never compares its output; the course website leaves the cell out (MyST-NB's tag).
TAGS = ["nbval-ignore-output", "remove-cell"]

INSTALL_CELL = f'''\
{MARK}: install the course, keeping the service's own torch,
# TensorFlow and NumPy (pip gets their versions as constraints), and bring the exercises' parts/
# (what check() reads) beside the notebook. Where the course is installed, this does nothing.
import importlib.util

if importlib.util.find_spec("edu_dl") is None:
    import shutil
    import subprocess
    import sys
    import tempfile
    from importlib.metadata import PackageNotFoundError, version
    from pathlib import Path

    keep = []
    for name in ("torch", "tensorflow", "tensorflow-cpu", "numpy"):
        try:
            keep.append(f"{{name}}=={{version(name)}}\\n")
        except PackageNotFoundError:
            pass
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as pins:
        pins.writelines(keep)
    course = Path(tempfile.mkdtemp()) / "edu-dl"
    repository = "{REPOSITORY}"
    subprocess.run(["git", "clone", "--quiet", "--depth", "1", repository, str(course)], check=True)
    extra = "" if importlib.util.find_spec("tensorflow") else "[cpu]"  # for lecture 6
    pip = [sys.executable, "-m", "pip", "install", "-c", pins.name, f"{{course}}{{extra}}"]
    subprocess.run(pip, check=True)
    if not Path("parts").exists():
        shutil.copytree(course / "exercises" / "parts", "parts")
    importlib.invalidate_caches()'''


CELL_ID = "install-the-course"


def install_cell(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    cell = nbformat.v4.new_code_cell(INSTALL_CELL, metadata={"tags": list(TAGS)})
    if (nb.nbformat, nb.nbformat_minor) >= (4, 5):  # a fixed id: no noise in the diffs
        cell.id = CELL_ID
    else:
        cell.pop("id", None)
    return cell


def is_install_cell(cell: nbformat.NotebookNode) -> bool:
    return cell.cell_type == "code" and cell.source.startswith(MARK)


def add_install_cell(nb: nbformat.NotebookNode) -> bool:
    """Put INSTALL_CELL first (or refresh it there); True when the notebook changed."""
    if nb.cells and is_install_cell(nb.cells[0]):
        first = nb.cells[0]
        if first.source == INSTALL_CELL and first.metadata.get("tags") == TAGS:
            return False
        first.source, first.metadata["tags"] = INSTALL_CELL, list(TAGS)
        return True
    cell = install_cell(nb)
    code = [c for c in nb.cells if c.cell_type == "code"]
    if any(c.get("execution_count") is not None for c in code):
        cell.execution_count = 1
        for c in code:
            if c.get("execution_count") is not None:
                c.execution_count += 1
            for output in c.get("outputs", []):
                if output.get("execution_count") is not None:
                    output.execution_count += 1
    nb.cells.insert(0, cell)
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m edu_dl.hosted", description=__doc__.split(
        "\n", 1)[0])
    parser.add_argument("notebooks", nargs="+", type=Path)
    args = parser.parse_args(argv)
    for path in args.notebooks:
        nb = nbformat.read(path, as_version=4)
        if add_install_cell(nb):
            nbformat.write(nb, path)
            print(f"{path}: install cell written")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
