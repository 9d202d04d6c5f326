"""The first cell of every notebook: install the course where it is missing (hosted notebooks).

Colab, Kaggle and other hosted services open a notebook in an environment of their own, with their
own PyTorch, TensorFlow and NumPy, and without edu_dl (the course is not on PyPI). The cell clones
the course's repository (git, one commit deep) and runs the installer it finds in that clone
(:mod:`edu_dl.notebook.hosted_install`: pip with the service's own torch, TensorFlow and NumPy kept,
the extras that fit them, and the exercises' `parts/` beside the notebook), so the cell holds only
what must run before the course exists: the clone. Where edu_dl is installed (`make lab`, nbval, the
grader's sandbox) the cell does nothing and prints nothing. Where the clone or the install fails,
the cell ends with one sentence that names the repository and what to do (IPython shows an
exception's `_render_traceback_` instead of its traceback), and Run All stops there instead of
failing in every later cell.

The repository is pyproject.toml's `[project.urls] Source`, read from the installed package's
metadata: a fork sets it there, reinstalls (`make install`) and regenerates the cells. The cell
cannot import edu_dl (edu_dl is what is missing), so each notebook holds INSTALL_CELL whole.
`python -m edu_dl.notebook.hosted NOTEBOOK...` puts it first in each notebook (or brings an older
one up to date) without executing anything: an executed notebook gets it as execution 1, with no
output (what it prints where the course is installed), and every later count moves up by one, as a
top-to-bottom run with the new cell would number them; refreshing a cell already there changes no
output. Exercises get it from their solutions through `edu-dl assign`. The cell is collapsed where
the notebook is opened: JupyterLab hides its source (`jupyter.source_hidden`), Colab shows it as a
form with its title (`#@title`, `cellView: form`).
"""

from __future__ import annotations

import argparse
from importlib import metadata
from pathlib import Path
from typing import Any

import nbformat

DISTRIBUTION = "edu-dl"
URL_LABEL = "Source"  # the [project.urls] key of the repository


def repository() -> str:
    """The course's repository: pyproject.toml's [project.urls] Source, as installed."""
    for entry in metadata.metadata(DISTRIBUTION).get_all("Project-URL") or []:
        label, _, url = entry.partition(",")
        if label.strip() == URL_LABEL:
            return url.strip()
    raise LookupError(f"the installed {DISTRIBUTION} names no {URL_LABEL} URL: set [project.urls] "
                      f"{URL_LABEL} in pyproject.toml and reinstall (make install)")


REPOSITORY = repository()
# The cell's first line: Colab's form title (the code stays folded under it).
MARK = "#@title Install the course (hosted notebooks: Colab, Kaggle, ...)"
FORMER_MARKS = ("# Hosted notebooks (Colab, Kaggle, ...)",)  # refreshed where found
# nbval never compares its output; the course website leaves the cell out (MyST-NB's tag).
TAGS = ["nbval-ignore-output", "remove-cell"]
# Collapsed where the notebook opens: JupyterLab hides the source, Colab shows the form.
METADATA: dict[str, Any] = {"tags": TAGS, "jupyter": {"source_hidden": True}, "cellView": "form"}

INSTALL_CELL = f'''\
{MARK} {{ display-mode: "form" }}
# Where edu_dl is missing, clone the course and run its installer from the clone
# (edu_dl/notebook/hosted_install.py: it keeps the service's own torch, TensorFlow and NumPy and
# brings the exercises' parts/ beside the notebook). Where the course is installed, do nothing.
import importlib.util

if importlib.util.find_spec("edu_dl") is None:
    import runpy
    import subprocess
    import tempfile

    REPOSITORY = "{REPOSITORY}"
    course = tempfile.mkdtemp() + "/edu-dl"
    try:
        subprocess.run(["git", "clone", "--quiet", "--depth", "1", REPOSITORY, course],
                       check=True, capture_output=True, text=True)
    except (OSError, subprocess.CalledProcessError) as exc:
        said = (getattr(exc, "stderr", None) or str(exc)).strip().splitlines() or ["git failed"]

        class CourseNotInstalled(Exception):
            def _render_traceback_(self):  # IPython shows this line instead of a traceback
                return [f"CourseNotInstalled: {{self}}"]

        raise CourseNotInstalled(
            f"could not download the course from {{REPOSITORY}} ({{said[-1].strip()}}): check "
            "that this notebook can reach the internet (on Kaggle, switch Internet on in the "
            "notebook's settings), then run this cell again") from None
    installer = runpy.run_path(course + "/edu_dl/notebook/hosted_install.py", run_name="__main__")
    installer["install"](course, REPOSITORY)'''


CELL_ID = "install-the-course"


def _collapsed(cell: nbformat.NotebookNode) -> bool:
    meta = cell.metadata
    return (meta.get("tags") == TAGS and meta.get("cellView") == METADATA["cellView"]
            and meta.get("jupyter", {}).get("source_hidden") is True)


def _collapse(cell: nbformat.NotebookNode) -> None:
    cell.metadata["tags"] = list(TAGS)
    cell.metadata["jupyter"] = {**cell.metadata.get("jupyter", {}), "source_hidden": True}
    cell.metadata["cellView"] = METADATA["cellView"]


def install_cell(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """A new INSTALL_CELL, collapsed; its id is CELL_ID where ``nb``'s format has ids (4.5 on)."""
    cell = nbformat.v4.new_code_cell(INSTALL_CELL)
    _collapse(cell)
    if (nb.nbformat, nb.nbformat_minor) >= (4, 5):  # a fixed id: no noise in the diffs
        cell.id = CELL_ID
    else:
        cell.pop("id", None)
    return cell


def is_install_cell(cell: nbformat.NotebookNode) -> bool:
    """Whether ``cell`` is the install cell, current or former: code that starts with its mark."""
    return cell.cell_type == "code" and cell.source.startswith((MARK, *FORMER_MARKS))


def add_install_cell(nb: nbformat.NotebookNode) -> bool:
    """Put INSTALL_CELL first (or refresh it there); True when the notebook changed."""
    if nb.cells and is_install_cell(nb.cells[0]):
        first = nb.cells[0]
        if first.source == INSTALL_CELL and _collapsed(first):
            return False
        first.source = INSTALL_CELL
        _collapse(first)
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
    """``python -m edu_dl.notebook.hosted NOTEBOOK...``: put the install cell first in each
    notebook (or refresh it), saying which it wrote; returns 0."""
    parser = argparse.ArgumentParser(prog="python -m edu_dl.notebook.hosted",
                                     description=__doc__.split("\n", 1)[0])
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
