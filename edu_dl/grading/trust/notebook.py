"""A notebook a student or a sandbox wrote, parsed as data."""

from __future__ import annotations

import nbformat

from ..notebooks import Notebook, NotebookError


def parse_notebook(data: bytes, name: str) -> Notebook:
    """A notebook from bytes already read (``name`` only for the message); NotebookError when
    it is not one."""
    try:
        return nbformat.reads(data.decode("utf-8"), as_version=4)
    except Exception as exc:  # JSON errors, wrong nbformat, binary junk
        raise NotebookError(f"{name}: not a readable Jupyter notebook ({type(exc).__name__}: "
                            f"{str(exc)[:300]})") from None
