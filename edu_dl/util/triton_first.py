"""Triton before TensorFlow, in every Python of the course's environment.

TensorFlow 2.20 and newer loads its statically linked LLVM with RTLD_GLOBAL; Triton 3.7 loaded
after it binds its own LLVM calls to TensorFlow's copy and the process dies (SIGSEGV inside
``import triton``; tensorflow/tensorflow#124205). torch imports Triton lazily where it is installed
(torch.compile, an optimizer's constructor, a decomposition), so a notebook that imports
TensorFlow and then trains with PyTorch would crash. Loaded the other way round, both work.

``make install`` runs this file as a script: it writes a one-line ``.pth`` into the environment's
site-packages, so that every interpreter there (a notebook's kernel, a sandboxed grading run, a
test worker) runs :func:`install` at start-up. That puts a finder first on ``sys.meta_path`` that
does nothing until ``tensorflow`` is first imported; then it imports ``triton`` (where it is
installed), steps aside, and lets TensorFlow load. A process that never imports TensorFlow pays
nothing; one that does pays Triton's import (about 0.3 s) before TensorFlow's own.

The file imports nothing from ``edu_dl`` (the ``.pth`` runs it before any package is importable)
and nothing that Python's start-up has not imported already.
"""

from __future__ import annotations

import importlib.util
import sys

PTH_NAME = "edu_dl_triton_first.pth"
MODULE_NAME = "_edu_dl_triton_first"  # the name the .pth runs this file under


class TritonFirst:
    """A meta-path finder that finds nothing: on the first ``import tensorflow`` it imports
    Triton (where installed) and removes itself."""

    def find_spec(self, name: str, path: object = None, target: object = None) -> None:
        if name == "tensorflow":
            sys.meta_path[:] = [f for f in sys.meta_path if f is not self]
            if importlib.util.find_spec("triton") is not None:
                try:
                    import triton  # noqa: F401
                except Exception:  # a broken Triton must not keep TensorFlow from loading
                    pass
        return None


def install() -> None:
    """The finder, first on ``sys.meta_path``, unless TensorFlow is loaded already (too late)
    or the finder is there."""
    if "tensorflow" in sys.modules:
        return
    if not any(type(f).__name__ == TritonFirst.__name__ for f in sys.meta_path):
        sys.meta_path.insert(0, TritonFirst())


def pth_line(source: str) -> str:
    """The .pth line that runs ``source`` (this file) at start-up, and nothing where the file
    is gone (a moved checkout): a .pth line that raises prints a traceback in every Python."""
    return (f"import os; p = {source!r}; os.path.isfile(p) and exec(compile(open(p).read(), p, "
            f"'exec'), {{'__name__': {MODULE_NAME!r}}})\n")


def write_pth(site_packages: str, line: str, name: str = PTH_NAME) -> str:
    """Write a one-line .pth (this file's by default) into ``site_packages``; returns its path.
    no_iri_grammars.py writes its own with it."""
    import os

    path = os.path.join(site_packages, name)
    with open(path, "w") as f:
        f.write(line)
    return path


if __name__ == "__main__":  # python edu_dl/util/triton_first.py: this Python's site-packages
    import os
    import sysconfig

    print("wrote", write_pth(sysconfig.get_paths()["purelib"], pth_line(os.path.abspath(__file__))))
elif __name__ == MODULE_NAME:  # run by the .pth at start-up
    install()
