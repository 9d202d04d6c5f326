"""Execute course notebooks in place, and record which course code produced their outputs.

``make notebooks`` runs ``python -m edu_dl.notebook.run NOTEBOOK...``. Each notebook runs top to
bottom in a fresh kernel in its own folder (nbclient), without per-cell timestamps or widget state
(they change on every run and only add noise to the diffs). Then one more cell, which is never
saved, asks the kernel which files its modules came from. The course's own files among them (the
``edu_dl`` package and the notebook's ``parts/``) go into the notebook's metadata with a digest of
each: ``metadata.edu_dl.sources = {"edu_dl/autograd/ops.py": "3f2a...", ...}``.

``stale(path)`` compares those digests with the files as they are now: a committed lecture whose
figures were produced by older code than the code it runs today is stale, and
``tests/test_notebook_freshness.py`` fails on it, naming the files that changed. Recorded GPU data
under ``benchmarks/gpu/`` is not covered: its PROVENANCE says what made it.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path
from typing import Any

import nbformat

PACKAGE = Path(__file__).resolve().parents[1]  # edu_dl/, this module being edu_dl/notebook/run.py
ROOT = PACKAGE.parent
META_KEY = "edu_dl"
DIGEST_CHARS = 16
# The probe cell: every file a module of the kernel came from, and the part files check() loaded
# (those are kept out of sys.modules, see edu_dl.grading.authoring.parts).
PROBE = """\
import json as _json, sys as _sys
_files = {getattr(_m, "__file__", None) for _m in list(_sys.modules.values())}
_parts = _sys.modules.get("edu_dl.grading.authoring.parts")
if _parts is not None:
    _files |= {str(_key[0]) for _key in _parts._MODULES}
print(_json.dumps(sorted(_f for _f in _files if _f)))"""


def digest(path: Path) -> str:
    """The first DIGEST_CHARS hex digits of the SHA-256 of the file's bytes."""
    return hashlib.sha256(path.read_bytes()).hexdigest()[:DIGEST_CHARS]


def course_files(files: list[str], notebook: Path) -> list[Path]:
    """The files among ``files`` that are course code: under edu_dl/, the notebook's parts/ or
    the students' own package beside it (the reference ``mytorch/`` beside the solutions)."""
    folder = notebook.resolve().parent
    roots = [PACKAGE, folder / "parts", folder / "mytorch"]
    found = []
    for name in files:
        path = Path(name).resolve()
        if path.suffix == ".py" and path.is_file() and any(path.is_relative_to(r) for r in roots):
            found.append(path)
    return sorted(set(found))


def source_digests(files: list[Path]) -> dict[str, str]:
    """{path relative to the repository (absolute outside it): digest}, for the metadata."""
    return {(path.relative_to(ROOT) if path.is_relative_to(ROOT) else path).as_posix():
            digest(path) for path in files}


def execute(path: Path, timeout_s: int = 600) -> dict[str, str]:
    """Run ``path`` in place and record the digests of the course code it ran; return them."""
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    probe = nbformat.v4.new_code_cell(PROBE)
    probe.pop("id", None)  # never saved, so it needs no stable id
    nb.cells.append(probe)
    client = NotebookClient(nb, timeout=timeout_s, kernel_name="python3",
                            resources={"metadata": {"path": str(path.resolve().parent)}},
                            record_timing=False, store_widget_state=False,
                            # every output is in: the kernel is killed, not asked to exit, whose
                            # exit frees module after module (1.8 s of CPU with TensorFlow
                            # loaded, 0.4 s with torch; 2026-12-05)
                            shutdown_kernel="immediate")
    try:
        client.execute()
    finally:
        nb.cells.pop()
    stream = "".join(o.get("text", "") for o in probe.outputs if o.get("output_type") == "stream")
    files = course_files(json.loads(stream.strip().splitlines()[-1]), path)
    sources = source_digests(files)
    nb.metadata.pop("widgets", None)
    record_sources(nb, sources)
    nbformat.write(nb, path)
    return sources


def record_sources(nb: Any, sources: dict[str, str]) -> None:
    """Put the digests into the notebook's metadata ``edu_dl.sources``. Only they are this
    module's: the rest of its ``edu_dl`` metadata (an exercise's budget, the name of the
    student's package) is the author's and stays."""
    kept = nb.metadata.get(META_KEY)
    nb.metadata[META_KEY] = {**(kept if isinstance(kept, dict) else {}), "sources": sources}


def stale(path: Path) -> list[str]:
    """Why ``path``'s outputs may be stale (empty when they were made by today's code)."""
    nb = nbformat.read(path, as_version=4)
    sources = nb.metadata.get(META_KEY, {}).get("sources")
    if not sources:
        return ["no record of the course code that produced its outputs"]
    problems = []
    for name, recorded in sorted(sources.items()):
        file = ROOT / name
        if not file.is_file():
            problems.append(f"{name} is gone")
        elif digest(file) != recorded:
            problems.append(f"{name} changed")
    return problems


def main(argv: list[str] | None = None) -> int:
    """``python -m edu_dl.notebook.run NOTEBOOK...``: execute each in place and record its
    sources; every notebook is tried, and the status is 1 when any failed."""
    parser = argparse.ArgumentParser(
        prog="python -m edu_dl.notebook.run",
        description="Execute notebooks in place (fresh kernel, in their own folder) and record "
        "the digests of the course code they ran in their metadata.")
    parser.add_argument("notebooks", nargs="+", type=Path)
    parser.add_argument("--timeout", type=int, default=600, help="seconds per cell (600)")
    args = parser.parse_args(argv)
    from tqdm import tqdm

    from edu_dl.util.progress import progress_disabled

    failed = []
    for path in tqdm(args.notebooks, desc="notebooks", unit="nb", file=sys.stderr,
                     disable=progress_disabled(len(args.notebooks) > 1)):
        try:
            sources = execute(path, args.timeout)
        except Exception as exc:  # report every notebook, then fail: one error must not hide more
            failed.append(path)
            print(f"{path}: FAILED: {type(exc).__name__}: {str(exc)[-2000:]}", file=sys.stderr)
        else:
            print(f"{path}: executed; {len(sources)} course files recorded", file=sys.stderr)
    if failed:
        print(f"{len(failed)} notebook(s) failed: {' '.join(map(str, failed))}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
