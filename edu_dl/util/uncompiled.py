"""The environment's .py files whose bytecode is missing or out of date, one path a line.

``make install`` byte-compiles the packages it installs with this file. It used to hand
compileall the files newer than the last install's stamp, but uv links a package's files from its
cache with the times they had there, so a second install (the developers' extras: pytest,
Hypothesis, Dask, Sphinx, Playwright) looked older than the stamp and nothing of it was compiled.
Where ``PYTHONDONTWRITEBYTECODE`` is set, as on many CI machines and in the grading sandbox, every
process then compiled them again at import: 0.8 s more CPU for each Dask worker's ``import
distributed``, 0.7 s more for each pytest process (2026-12-05, 2 cores).

So this reads each file's bytecode header instead, as the interpreter does at import: a file is
listed when its ``__pycache__`` entry is missing or records another modification time or size
(compileall's own check, run on every file with ``-j 0``, took 9 s on 2 cores to find nothing in
16,000 files; this takes well under one). Packages' own ``tests/`` folders are left out:
nothing imports them.

``--compile`` compiles them too, on every core: compileall's ``-j`` spreads the files of a folder
over processes, but compiles a list of files given with ``-i`` one by one in one process (16,000
files took 30 s on 2 cores as a folder and about twice that as a list).

Usage: ``python edu_dl/util/uncompiled.py [--compile] [FOLDER ...]`` (no folder: the running
Python's site-packages). Standard library only: it runs before the course is importable.
"""

from __future__ import annotations

import compileall
import importlib.util
import os
import sys
import sysconfig
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

HEADER_BYTES = 16  # magic, flags, then the source's mtime and size (PEP 552)


def up_to_date(source: Path) -> bool:
    """Whether the bytecode Python would load for ``source`` exists and matches its time and size
    (a hash-based .pyc, which compileall never writes by default, counts as up to date)."""
    try:
        with open(importlib.util.cache_from_source(str(source)), "rb") as f:
            header = f.read(HEADER_BYTES)
        stat = source.stat()
    except OSError:
        return False
    if len(header) < HEADER_BYTES or header[:4] != importlib.util.MAGIC_NUMBER:
        return False
    if int.from_bytes(header[4:8], "little") & 0b1:  # hash-based: checked against the source
        return True
    mtime = int.from_bytes(header[8:12], "little")
    size = int.from_bytes(header[12:16], "little")
    return mtime == int(stat.st_mtime) & 0xFFFFFFFF and size == stat.st_size & 0xFFFFFFFF


def uncompiled(top: Path) -> Iterator[Path]:
    """The .py files below ``top`` (not in a ``tests`` folder) that need compiling."""
    for folder, dirs, files in os.walk(top):
        dirs[:] = [d for d in dirs if d not in ("tests", "__pycache__")]
        for name in files:
            if name.endswith(".py") and not up_to_date(path := Path(folder, name)):
                yield path


def _compile(path: Path) -> bool:
    # compileall's own per-file step: quiet, and False (not an exception) for a file this
    # Python cannot compile (torch's py312_intrinsics.py under 3.11), which stays uncompiled.
    return compileall.compile_file(path, quiet=2)


def compile_all(paths: list[Path], workers: int | None = None) -> int:
    """Compile ``paths`` on ``workers`` processes (every core by default); returns how many
    could not be compiled."""
    if len(paths) < 2 or workers == 1:
        return sum(not _compile(p) for p in paths)
    with ProcessPoolExecutor(workers or os.cpu_count()) as pool:
        return sum(not ok for ok in pool.map(_compile, paths, chunksize=64))


def main(argv: list[str]) -> int:
    """Print what :func:`uncompiled` finds below each folder in ``argv`` (none: site-packages),
    or with ``--compile`` compile it and say how many files that took."""
    compile_them = "--compile" in argv
    tops = [Path(a) for a in argv if a != "--compile"]
    found = [path for top in tops or [Path(sysconfig.get_paths()["purelib"])]
             for path in uncompiled(top)]
    if not compile_them:
        for path in found:
            print(path)
        return 0
    failed = compile_all(found)
    print(f"compiled {len(found) - failed:,} files" + (f" ({failed} this Python cannot compile)"
                                                      if failed else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
