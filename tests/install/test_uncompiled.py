"""edu_dl/util/uncompiled.py: which of the environment's files make byte-compiles. A file is
listed when its bytecode is missing or was compiled from another version of it, whatever the
file's time says (uv links files from its cache with old times); and make's install left none of
the packages it installed uncompiled, the developers' extras included."""

from __future__ import annotations

import importlib.util
import os
import py_compile
import subprocess
import sys
import sysconfig
from pathlib import Path

from edu_dl.util import uncompiled

ROOT = Path(__file__).resolve().parents[2]


def listed(top: Path) -> set[str]:
    return {p.relative_to(top).as_posix() for p in uncompiled.uncompiled(top)}


def test_missing_and_stale_bytecode_are_listed_and_old_files_are_not(tmp_path: Path) -> None:
    for name in ("fresh.py", "stale.py", "missing.py", "pkg/old.py", "tests/skipped.py",
                 "hashed.py"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("x = 1\n")
    for name in ("fresh.py", "stale.py", "pkg/old.py"):
        py_compile.compile(str(tmp_path / name), doraise=True)
    py_compile.compile(str(tmp_path / "hashed.py"), doraise=True,
                       invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH)
    # A file older than any stamp (as uv links them) but compiled is up to date...
    os.utime(tmp_path / "pkg/old.py", (0, 0))
    py_compile.compile(str(tmp_path / "pkg/old.py"), doraise=True)
    # ...and one changed after it was compiled is not, even with its old time put back.
    stat = (tmp_path / "stale.py").stat()
    (tmp_path / "stale.py").write_text("x = 22\n")
    os.utime(tmp_path / "stale.py", ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert listed(tmp_path) == {"stale.py", "missing.py"}
    # A truncated or foreign .pyc is not up to date either.
    pyc = Path(importlib.util.cache_from_source(str(tmp_path / "fresh.py")))
    pyc.write_bytes(pyc.read_bytes()[:10])
    assert "fresh.py" in listed(tmp_path)


def test_compile_all_compiles_on_several_processes_and_counts_what_cannot_be(tmp_path: Path
                                                                           ) -> None:
    for i in range(70):  # more than one chunk of files per process
        (tmp_path / f"m{i}.py").write_text(f"x = {i}\n")
    (tmp_path / "newer.py").write_text("match = (x := 1)\ndef f(:\n")  # a syntax error
    paths = sorted(uncompiled.uncompiled(tmp_path))
    assert len(paths) == 71
    assert uncompiled.compile_all(paths, workers=2) == 1
    assert listed(tmp_path) == {"newer.py"}
    assert uncompiled.compile_all([tmp_path / "newer.py"]) == 1  # one file: no pool


def test_the_script_prints_one_path_a_line(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("")
    (tmp_path / "b.py").write_text("")
    py_compile.compile(str(tmp_path / "b.py"), doraise=True)
    done = subprocess.run([sys.executable, str(ROOT / "edu_dl/util/uncompiled.py"),
                           str(tmp_path)], capture_output=True, text=True, check=True, timeout=60)
    assert done.stdout.splitlines() == [str(tmp_path / "a.py")]


# Parts of packages that no test process imports (mypy runs its compiled .so files, not the .py
# beside them; the site builds HTML, not LaTeX): only make's compileall can have compiled them,
# so this holds however much the suite imported before it. One per extra; the developers' come
# in a second install.
NEVER_IMPORTED = {"torch (cpu)": "torch/testing/_internal/distributed",
                  "mypy (dev)": "mypy", "hypothesis (dev)": "hypothesis/extra/django",
                  "sphinx (site)": "sphinx/builders/latex",
                  "distributed (cluster)": "distributed/dashboard"}


def test_make_compiled_what_each_extra_installed() -> None:
    site = Path(sysconfig.get_paths()["purelib"])
    assert (site / "mypy").is_dir(), "make test installs the developers' extras (mypy)"
    for extra, folder in NEVER_IMPORTED.items():
        if not (site / folder).is_dir():
            continue
        left = listed(site / folder)
        assert not left, f"{extra}: {sorted(left)[:5]} ({len(left)} files) not byte-compiled"
