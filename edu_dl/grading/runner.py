"""Execute one submission inside the sandbox: ``python -m edu_dl.grading.runner NOTEBOOK DIR``.

The runner drives its kernel (``kernel.py``: IPython's shell, as ipykernel runs it) over pipes,
as nbclient drives ipykernel over ZeroMQ, at a fraction of the cost (``kernel.py`` says why).
Every code cell runs with a timeout, and the whole notebook within one time budget
(``--budget``), however many cells a student adds; an error, a timeout or a dead kernel is
recorded and never stops the record from being written. Captured output is capped here, on the
runner's side, so a student printing gigabytes costs the sandbox, never the grader.

``DIR`` holds ``inputs/`` (handed in by the grader); ``check`` writes ``DIR/outputs/``. At the end
the runner packs ``run.json`` (one entry per cell) and the outputs into a zip written to the
descriptor in ``$EDU_DL_RESULT_FD`` (a pipe the grader drains; or ``--result FILE``): the one
thing the grader reads back. Nothing here decides a grade: the grader compares outside.

The kernel runs the student's code as this process's child, with the same uid, and learns the
result descriptor's number from its environment. So the first thing the runner does is make
itself non-dumpable: its ``/proc/<pid>/fd``, ``mem`` and ``environ`` then belong to root, and
``pidfd_getfd`` and ``ptrace`` are refused (both are denied by the seccomp filter as well), so the
student cannot take the descriptor and write a result of their own. They can still kill the
runner: their own run then returns nothing.
"""

from __future__ import annotations

import argparse
import io
import json
import math
import os
import signal
import sys
import time
import zipfile
from pathlib import Path
from typing import Any


def _sibling(name: str) -> Any:
    """edu_dl.grading.<name>. Run as a file (``python -P .../runner.py``, as the sandbox runs
    it), the file beside this one is loaded alone: importing it as part of the package would
    import the package (NumPy, the engines: 0.13 s of CPU in every sandbox) for a few names."""
    if __package__:
        import importlib

        return importlib.import_module(f"edu_dl.grading.{name}")
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"edu_dl_runner_{name}",
                                                  Path(__file__).with_name(f"{name}.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


_P, _K = _sibling("protocol"), _sibling("kernel_client")
Kernel, KernelDied, FLOOD, _source = _K.Kernel, _K.KernelDied, _K.FLOOD, _K.source
EXECUTED, GRADING_ENV, OUTPUTS = _P.EXECUTED, _P.GRADING_ENV, _P.OUTPUTS
RESULT_FD_VAR, RUN_RECORD, GATE_FD_VAR = _P.RESULT_FD_VAR, _P.RUN_RECORD, _P.GATE_FD_VAR
TEXT_CAP = 2000  # characters of an error message kept per cell


def _short(text: Any) -> str:
    text = str(text)
    return text if len(text) <= TEXT_CAP else text[:TEXT_CAP] + " [...]"


def execute(notebook: Path, grading_dir: Path, *, timeout: float, output_cap: int,
            budget: float = float("inf"), startup_timeout: float = 60.0,
            skip_after_timeout: bool = False) -> tuple[dict[str, Any], Any]:
    """Run every code cell of ``notebook`` in a fresh kernel within ``budget`` seconds in all.

    ``skip_after_timeout``: once a cell runs over ``timeout``, the later cells are not run (a
    looping function would time out again in every cell that calls it); the record's kernel
    state is then "timeout". Returns the record (one entry per code cell) and the executed
    notebook (None if unreadable).
    """
    deadline = time.monotonic() + budget
    record: dict[str, Any] = {"cells": [], "kernel": "ok", "message": "", "output_cut": False}
    (grading_dir / OUTPUTS).mkdir(parents=True, exist_ok=True)
    Path(os.environ.setdefault("HOME", "/tmp/home")).mkdir(parents=True, exist_ok=True)
    os.environ[GRADING_ENV] = str(grading_dir)
    # The kernel first: it boots (a tenth of a second) while this process reads the notebook.
    starting = time.monotonic()
    try:
        kernel = Kernel(notebook.parent, output_cap,
                        {k: v for k, v in os.environ.items() if k != GATE_FD_VAR})
    except Exception as exc:  # kernel failed to start: recorded as such
        record.update(kernel="failed", message=_short(f"{type(exc).__name__}: {exc}"))
        return record, None
    try:
        nb = _read_unvalidated(notebook)
    except Exception as exc:  # the grader validated it, but be safe: record, never crash
        kernel.stop()
        record.update(kernel="unreadable", message=_short(f"{type(exc).__name__}: {exc}"))
        return record, None
    cells = [(i, c) for i, c in enumerate(nb["cells"]) if c.get("cell_type") == "code"]
    try:
        kernel.wait_ready(min(startup_timeout, budget))
        record["kernel_seconds"] = round(time.monotonic() - starting, 3)  # the cost report's
        waited = _wait_at_gate()  # started ahead: nothing of the student's has run yet
        deadline += waited  # the budget counts what it counted without the wait
        record["gate_seconds"] = round(waited, 3)
        for done, (index, cell) in enumerate(cells):
            left = deadline - time.monotonic()
            if left < 1.0:
                record.update(kernel="budget", message=f"the notebook's time budget of "
                              f"{budget:g} s ran out before cell {index}; later cells "
                              "were not run")
                record["cells"] += [_skipped(i, c) for i, c in cells[done:]]
                break
            cell_timeout = max(1, math.floor(min(timeout, left)))  # whole seconds
            entry = _run_cell(kernel, cell, index, cell_timeout)
            if entry["status"] == "timeout" and left < timeout:
                entry["error"] = (f"the notebook's time budget of {budget:g} s ran out in "
                                  "this cell (interrupted)")
            record["cells"].append(entry)
            if entry["status"] == "timeout" and skip_after_timeout and left >= timeout:
                # its own timeout, not the budget's end (the loop's next turn says that)
                record.update(kernel="timeout", message=f"cell {index} ran over "
                              f"{cell_timeout:g} s; later cells were not run")
                record["cells"] += [_skipped(i, c) for i, c in cells[done + 1 :]]
                break
            if entry["status"] == "timeout" and not kernel.responsive():
                record.update(kernel="stuck", message="the kernel ignored the interrupt "
                              f"after cell {index} timed out; later cells were not run")
                record["cells"] += [_skipped(i, c) for i, c in cells[done + 1 :]]
                break
    except KernelDied as exc:
        dead = len(record["cells"])
        if dead < len(cells):
            index, cell = cells[dead]
            record["cells"].append({**_skipped(index, cell), "status": "died"})
            record["cells"] += [_skipped(i, c) for i, c in cells[dead + 1 :]]
        how = exc.args[0] if exc.args else "the kernel died (os._exit, a crash or a kill)"
        record.update(kernel="died", message=_short(
            f"{how} while running cell {cells[dead][0] if dead < len(cells) else '?'}"))
    except Exception as exc:  # kernel failed to start, a runner error: recorded as such
        record.update(kernel="failed", message=_short(f"{type(exc).__name__}: {exc}"))
    finally:
        kernel.stop()
    record["output_cut"] = kernel.output_cut
    return record, nb


def _read_unvalidated(notebook: Path) -> dict[str, Any]:
    """The notebook the grader restored and validated (nbformat 4, compact JSON), read as plain
    JSON: nbformat's reader and validator would cost every sandbox a tenth of a second."""
    nb = json.loads(notebook.read_text(encoding="utf-8"))
    cells = nb.get("cells") if isinstance(nb, dict) else None
    if not isinstance(cells, list) or nb.get("nbformat") != 4:
        raise ValueError("not a notebook of nbformat 4")
    if not all(isinstance(cell, dict) for cell in cells):
        raise ValueError("a cell is not an object")
    return nb


def _wait_at_gate() -> float:
    """Grading ahead: block until the grader opens this run's gate (one byte on the pipe
    $EDU_DL_GATE_FD names), and return the seconds waited; 0 without a gate. A gate closed
    unopened means the grader gave this run up: the runner ends, and no cell runs."""
    fd = os.environ.pop(GATE_FD_VAR, None)
    if fd is None:
        return 0.0
    began = time.monotonic()
    with open(int(fd), "rb", buffering=0) as gate:
        opened = gate.read(1)
    if opened != b"1":
        os._exit(0)  # nothing to report: the grader reads no result from a run it gave up
    return time.monotonic() - began


def _grade_id(cell: Any) -> str:
    return str(cell.get("metadata", {}).get("nbgrader", {}).get("grade_id", ""))


def _skipped(index: int, cell: Any) -> dict[str, Any]:
    return {"index": index, "grade_id": _grade_id(cell), "status": "not run", "error": ""}


def _run_cell(kernel: Any, cell: Any, index: int, timeout: float) -> dict[str, Any]:
    start = time.monotonic()
    entry = {"index": index, "grade_id": _grade_id(cell), "status": "ok", "error": ""}
    if not _source(cell).strip():
        entry.update(stderr=False, seconds=0.0)  # as nbclient: an empty cell is not run
        return entry
    finished = kernel.run(cell, timeout)
    errors = [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]
    if kernel.flooded:
        entry.update(status="error", error=f"the cell printed over {FLOOD * kernel.output_cap} "
                     "bytes of output and was interrupted")
    elif not finished:
        entry.update(status="timeout", error=f"cell ran over {timeout:g} s (interrupted)")
    elif errors:
        entry.update(status="error",
                     error=_short(f"{errors[-1].get('ename', '')}: {errors[-1].get('evalue', '')}"))
    entry["stderr"] = kernel.cell_stderr
    entry["seconds"] = round(time.monotonic() - start, 3)
    return entry


def pack(record: dict[str, Any], grading_dir: Path, result: io.RawIOBase,
         executed: Any = None, limit: int | None = None) -> None:
    """Write run.json, the executed notebook and the outputs as a zip into ``result`` (the
    sandbox's only way out). Over ``limit`` bytes (what the grader reads back), or where the
    write fails (a file over RLIMIT_FSIZE), only the record goes, saying so."""
    outputs = sorted((grading_dir / OUTPUTS).glob("*.npz"))
    buffer = io.BytesIO()  # built here first: a write cut short must not leave half a zip
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as zf:
        zf.writestr(RUN_RECORD, json.dumps(record))
        if executed is not None:
            # unvalidated as it was read: the grader parses what comes back, strictly
            zf.writestr(EXECUTED, json.dumps(executed))
        for path in outputs:
            if path.is_file() and not path.is_symlink():
                zf.write(path, f"{OUTPUTS}/{path.name}")
    data = buffer.getvalue()
    if limit is not None and len(data) > limit:  # a pipe cannot be taken back: decide first
        data = _record_only(record, f"{len(data)} bytes, over the limit of {limit}")
    try:
        _write_all(result, data)
    except BrokenPipeError:  # the grader stopped reading: nothing more can reach it
        return
    except OSError as exc:  # a file over the file-size limit: keep the record, drop the outputs
        if not result.seekable():
            return
        result.seek(0)
        result.truncate()
        _write_all(result, _record_only(record, str(exc)))


def _record_only(record: dict[str, Any], why: str) -> bytes:
    record["message"] = _short(f"results too large to return ({why}); {record['message']}")
    small = io.BytesIO()
    with zipfile.ZipFile(small, "w", zipfile.ZIP_STORED) as zf:
        zf.writestr(RUN_RECORD, json.dumps(record))
    return small.getvalue()


def undumpable() -> bool:
    """prctl(PR_SET_DUMPABLE, 0): this process's /proc files, memory and descriptors out of
    reach of its own children (the kernel, the student's code). True if it took."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    return libc.prctl(4, 0, 0, 0, 0) == 0  # PR_SET_DUMPABLE = 4


def _write_all(out: io.RawIOBase, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[out.write(view) or 0:]


def main(argv: list[str] | None = None) -> int:
    """The runner's command line: execute the notebook and write the result zip, even when the
    run crashes (the record then says so); a finished run returns 0, however its cells went."""
    # First: before the kernel (the student's code) exists, nothing of this process is its.
    if not undumpable():
        print("runner: prctl(PR_SET_DUMPABLE, 0) failed", file=sys.stderr)
    parser = argparse.ArgumentParser(prog="python -m edu_dl.grading.runner")
    parser.add_argument("notebook", type=Path)
    parser.add_argument("grading_dir", type=Path, help="holds inputs/; outputs/ is written here")
    parser.add_argument("--result", type=Path, help="the zip to write (default: the descriptor "
                        "in $EDU_DL_RESULT_FD)")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds per cell")
    parser.add_argument("--budget", type=float, default=float("inf"),
                        help="seconds for the whole notebook")
    parser.add_argument("--output-cap", type=int, default=1 << 20, help="bytes of output kept")
    parser.add_argument("--skip-after-timeout", action="store_true",
                        help="after a cell times out, run no later cell")
    parser.add_argument("--result-limit", type=int, default=None,
                        help="bytes of result the grader reads back: over it, the record alone")
    args = parser.parse_args(argv)
    # Over RLIMIT_FSIZE a write fails with EFBIG instead of killing the runner.
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    record: dict[str, Any] = {"cells": [], "kernel": "failed", "message": "runner crashed"}
    executed = None
    try:
        record, executed = execute(args.notebook, args.grading_dir, timeout=args.timeout,
                                   output_cap=args.output_cap, budget=args.budget,
                                   skip_after_timeout=args.skip_after_timeout)
    finally:
        fd = os.environ.get(RESULT_FD_VAR)
        target = args.result if args.result else int(fd or -1)
        with open(target, "wb", buffering=0) as out:
            pack(record, args.grading_dir, out, executed, args.result_limit)
    try:
        print(f"runner: {len(record['cells'])} cells, kernel {record['kernel']}",
              file=sys.stderr)
    except OSError:  # the grader closed the log (a flood): nothing is lost
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
