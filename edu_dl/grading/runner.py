"""Execute one submission inside the sandbox: ``python -m edu_dl.grading.runner NOTEBOOK DIR``.

The notebook client runs here, next to its kernel, because the sandbox has no network: only
loopback, which both share. Every code cell runs with a timeout, and the whole notebook within one
time budget (``--budget``), however many cells a student adds; an error, a timeout or a dead kernel
is recorded and never stops the record from being written. Captured output is capped here, on the
client side, so a student printing gigabytes costs the sandbox, never the grader.

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


def _protocol() -> Any:
    """edu_dl.grading.protocol. Run as a file (``python -P .../runner.py``, as the sandbox runs
    it), protocol.py beside this file is loaded alone: importing it as part of the package would
    import the package (NumPy, the engines: 0.13 s of CPU in every sandbox) for six names."""
    if __package__:
        from edu_dl.grading import protocol

        return protocol
    import importlib.util

    spec = importlib.util.spec_from_file_location("edu_dl_runner_protocol",
                                                  Path(__file__).with_name("protocol.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


_P = _protocol()
EXECUTED, GRADING_ENV, OUTPUTS = _P.EXECUTED, _P.GRADING_ENV, _P.OUTPUTS
RESULT_FD_VAR, RUN_RECORD, skip_slow_optional_imports = (_P.RESULT_FD_VAR, _P.RUN_RECORD,
                                                         _P.skip_slow_optional_imports)
GATE_FD_VAR = _P.GATE_FD_VAR
# The rest of jsonschema's optional format checkers that cost at import (isoduration brings
# arrow): about 55 ms of CPU per process, for formats nbformat never checks (it validates
# without a format checker).
FORMAT_CHECKERS = ("isoduration", "rfc3986_validator", "rfc3339_validator", "uri_template",
                   "webcolors")


def skip_output_validation() -> None:
    """Here only: nbclient makes every output through nbformat's ``new_output``, which checks it
    against the notebook schema, and the first check compiles that schema (0.09 s of CPU in
    every sandbox). The check proves nothing here: what this process writes is the student's
    to forge, and the grader parses every byte of it strictly (edu_dl.grading.trust)."""
    from nbformat.v4 import nbbase

    nbbase.validate = lambda node, ref=None: None


def skip_format_checkers() -> None:
    """Here only: no Jupyter server, whose event schemas do check formats, ever runs in the
    runner's process. jsonschema skips these checkers, as where they are not installed."""
    for name in FORMAT_CHECKERS:
        sys.modules.setdefault(name, None)  # type: ignore[arg-type]

TEXT_CAP = 2000  # characters of an error message kept per cell
FLOOD = 16  # a cell printing more than FLOOD x the output cap is interrupted


def _client_class() -> Any:
    from nbclient import NotebookClient

    class CappedClient(NotebookClient):
        """A NotebookClient that keeps at most ``output_cap`` bytes of cell output in all."""

        output_cap = 1 << 20
        output_bytes = 0  # in the whole notebook: what is kept
        cell_bytes = 0  # in the running cell: what triggers an interrupt
        output_cut = False
        timed_out = False
        flooded = False  # this cell printed over FLOOD x output_cap: interrupted
        cell_stderr = False  # this cell wrote to stderr (kept or dropped): nbgrader scores 0

        async def _async_handle_timeout(self, timeout: int, cell: Any = None) -> Any:
            self.timed_out = True  # the kernel's reply may then be a plain KeyboardInterrupt
            return await super()._async_handle_timeout(timeout, cell)

        def output(self, outs: list[Any], msg: dict[str, Any], display_id: Any,
                   cell_index: int) -> Any:
            content = msg.get("content", {})
            if msg.get("msg_type") == "stream" and content.get("name") == "stderr":
                self.cell_stderr = True  # recorded even when the output itself is dropped
            text = content.get("text") if isinstance(content.get("text"), str) else None
            size = len(text) if text is not None else len(json.dumps(content, default=str))
            self.output_bytes += size
            self.cell_bytes += size
            if self.output_bytes > self.output_cap and msg.get("msg_type") != "error":
                self.output_cut = True
                if self.cell_bytes > FLOOD * self.output_cap and not self.flooded:
                    self.flooded = True  # stop the flood at its source: interrupt the kernel
                    try:
                        pid = getattr(getattr(self.km, "provisioner", None), "pid", None)
                        os.kill(int(pid), signal.SIGINT)  # type: ignore[arg-type]
                    except Exception:
                        pass
                return None  # dropped: we keep nothing more
            return super().output(outs, msg, display_id, cell_index)

    return CappedClient


# The kernel as ipykernel_launcher starts it, less debugpy: nothing here is debugged, and its
# import was a fifth of the kernel's start. The student's code cannot bring it back in this
# kernel (the import fails), which is fine: a debugger has no use in a sandbox.
KERNEL_LAUNCH = ("import importlib.util, sys\nsys.modules['debugpy'] = None\n"
                 "if sys.path[0] == '':\n    del sys.path[0]\n"
                 "sys.argv[0] = importlib.util.find_spec('ipykernel_launcher').origin\n"
                 "from ipykernel import kernelapp\nkernelapp.launch_new_instance()\n")


def _kernel_manager_class() -> Any:
    """jupyter_client's kernel manager for the python3 kernel, started by KERNEL_LAUNCH, whose
    clients are ready as soon as the kernel is (``_ready_client_class``)."""
    from jupyter_client.kernelspec import KernelSpec
    from jupyter_client.manager import AsyncKernelManager
    from traitlets import default

    spec = KernelSpec(argv=[sys.executable, "-c", KERNEL_LAUNCH, "-f", "{connection_file}"],
                      display_name="Python 3 (ipykernel)", language="python")
    client_class = _ready_client_class()

    class GradingKernelManager(AsyncKernelManager):
        @property
        def kernel_spec(self) -> KernelSpec:
            return spec

        @default("client_factory")
        def _client_factory_default(self) -> Any:
            return client_class

    return GradingKernelManager


def _ready_client_class() -> Any:
    """An AsyncKernelClient whose wait_for_ready returns once the kernel has answered
    kernel_info and its IOPub channel is seen to work. jupyter_client's own then waits for 0.2 s
    of silence on IOPub, to flush it: 0.2 s of every notebook's run spent waiting for nothing
    (nbclient reads only the messages of the request it sent, so an old one left there is
    never mistaken for a cell's output)."""
    from queue import Empty

    from jupyter_client.asynchronous import AsyncKernelClient

    class ReadyClient(AsyncKernelClient):
        async def wait_for_ready(self, timeout: float | None = None) -> None:
            deadline = time.monotonic() + (math.inf if timeout is None else timeout)
            while True:
                asked = self.kernel_info()
                try:
                    reply = await self.shell_channel.get_msg(timeout=1)
                except Empty:
                    pass
                else:
                    if reply["msg_type"] == "kernel_info_reply" and await self._iopub_works(asked):
                        self._handle_kernel_info_reply(reply)
                        return
                if not await self._async_is_alive():
                    raise RuntimeError("Kernel died before replying to kernel_info")
                if time.monotonic() > deadline:
                    raise RuntimeError(f"Kernel didn't respond in {timeout:g} s")

        async def _iopub_works(self, asked: str) -> bool:
            """Whether IOPub brings the kernel's status for the kernel_info request ``asked``
            (a subscription made late misses it: then ask again, as jupyter_client does)."""
            while True:
                try:
                    msg = await self.iopub_channel.get_msg(timeout=0.2)
                except Empty:
                    return False
                if msg["msg_type"] == "status" and \
                        msg.get("parent_header", {}).get("msg_id") == asked:
                    return True

    return ReadyClient


def _start_kernel(cwd: Path) -> Any:
    """Start the python3 kernel (KERNEL_LAUNCH) in ``cwd`` and return its manager at once,
    without waiting for it to be ready: nbclient's setup_kernel waits (``startup_timeout``)."""
    from jupyter_core.utils import run_sync

    km = _kernel_manager_class()(kernel_name="python3")
    # as nbclient starts an IPython kernel: no history file (a sandbox keeps nothing)
    run_sync(km.start_kernel)(extra_arguments=["--HistoryManager.hist_file=:memory:"],
                              cwd=str(cwd))
    return km


def _stop_kernel(km: Any) -> None:
    from jupyter_core.utils import run_sync

    try:
        run_sync(km.shutdown_kernel)(now=True)
    except Exception:  # the sandbox ends with this process anyway
        pass


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
    # The kernel first: it boots (half a second) while this process imports nbformat and
    # nbclient and reads the notebook.
    starting = time.monotonic()
    try:
        km = _start_kernel(notebook.parent)
    except Exception as exc:  # kernel failed to start: recorded as such
        record.update(kernel="failed", message=_short(f"{type(exc).__name__}: {exc}"))
        return record, None
    from nbclient.exceptions import CellTimeoutError, DeadKernelError

    try:
        nb = _read_unvalidated(notebook)
    except Exception as exc:  # the grader validated it, but be safe: record, never crash
        _stop_kernel(km)
        record.update(kernel="unreadable", message=_short(f"{type(exc).__name__}: {exc}"))
        return record, None
    client = _client_class()(
        nb, km=km, timeout=math.ceil(timeout),
        startup_timeout=math.ceil(min(startup_timeout, budget)),
        allow_errors=True, interrupt_on_timeout=True, record_timing=False,
        shutdown_kernel="immediate",  # every cell's output is in: no wait for a polite exit
        error_on_timeout={"ename": "CellTimeout", "evalue": f"cell ran over {timeout:g} s"},
        resources={"metadata": {"path": str(notebook.parent)}},
    )
    client.owns_km = True  # so setup_kernel stops it at the end, as a kernel it started
    client.output_cap = output_cap
    cells = [(i, c) for i, c in enumerate(nb.cells) if c.cell_type == "code"]
    try:
        with client.setup_kernel():
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
                client.timeout = max(1, math.floor(min(timeout, left)))  # whole seconds
                entry = _run_cell(client, cell, index, CellTimeoutError)
                if entry["status"] == "timeout" and left < timeout:
                    entry["error"] = (f"the notebook's time budget of {budget:g} s ran out in "
                                      "this cell (interrupted)")
                record["cells"].append(entry)
                if entry["status"] == "timeout" and skip_after_timeout and left >= timeout:
                    # its own timeout, not the budget's end (the loop's next turn says that)
                    record.update(kernel="timeout", message=f"cell {index} ran over "
                                  f"{client.timeout:g} s; later cells were not run")
                    record["cells"] += [_skipped(i, c) for i, c in cells[done + 1 :]]
                    break
                if entry["status"] == "timeout" and not _responsive(client):
                    record.update(kernel="stuck", message="the kernel ignored the interrupt "
                                  f"after cell {index} timed out; later cells were not run")
                    record["cells"] += [_skipped(i, c) for i, c in cells[done + 1 :]]
                    break
    except DeadKernelError:
        dead = len(record["cells"])
        if dead < len(cells):
            index, cell = cells[dead]
            record["cells"].append({**_skipped(index, cell), "status": "died"})
            record["cells"] += [_skipped(i, c) for i, c in cells[dead + 1 :]]
        record.update(kernel="died", message="the kernel died (os._exit, a crash or a kill) "
                      f"while running cell {cells[dead][0] if dead < len(cells) else '?'}")
    except Exception as exc:  # kernel failed to start, client error: recorded as such
        record.update(kernel="failed", message=_short(f"{type(exc).__name__}: {exc}"))
    record["output_cut"] = client.output_cut
    return record, nb


def _read_unvalidated(notebook: Path) -> Any:
    """The notebook the grader restored and validated, read without nbformat's validation
    (a fast validator compiled for one notebook: 0.05 s of every sandbox's CPU)."""
    import nbformat
    from nbformat.reader import reads

    nb = reads(notebook.read_text(encoding="utf-8"))
    return nb if nb.get("nbformat") == 4 else nbformat.convert(nb, 4)


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


def _run_cell(client: Any, cell: Any, index: int,
              timeout_error: type[BaseException]) -> dict[str, Any]:
    start = time.monotonic()
    entry = {"index": index, "grade_id": _grade_id(cell), "status": "ok", "error": ""}
    client.timed_out = client.flooded = client.cell_stderr = False
    client.cell_bytes = 0
    try:
        client.execute_cell(cell, index)
    except timeout_error:
        client.timed_out = True
    reply = [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]
    if client.flooded:
        entry.update(status="error", error=f"the cell printed over {FLOOD * client.output_cap} "
                     "bytes of output and was interrupted")
    elif client.timed_out:
        entry.update(status="timeout", error=f"cell ran over {client.timeout:g} s (interrupted)")
    elif reply:
        entry.update(status="error",
                     error=_short(f"{reply[-1].get('ename', '')}: {reply[-1].get('evalue', '')}"))
    entry["stderr"] = client.cell_stderr
    entry["seconds"] = round(time.monotonic() - start, 3)
    return entry


def _responsive(client: Any, wait: float = 10.0) -> bool:
    """After an interrupt: does the kernel run a trivial cell within ``wait`` seconds?"""
    import nbformat

    timeout, client.timeout, client.timed_out = client.timeout, wait, False
    try:
        client.execute_cell(nbformat.v4.new_code_cell("pass"), 0, store_history=False)
    except Exception:
        return False
    finally:
        client.timeout = timeout
    return not client.timed_out


def pack(record: dict[str, Any], grading_dir: Path, result: io.RawIOBase,
         executed: Any = None, limit: int | None = None) -> None:
    """Write run.json, the executed notebook and the outputs as a zip into ``result`` (the
    sandbox's only way out). Over ``limit`` bytes (what the grader reads back), or where the
    write fails (a file over RLIMIT_FSIZE), only the record goes, saying so."""
    import nbformat

    outputs = sorted((grading_dir / OUTPUTS).glob("*.npz"))
    buffer = io.BytesIO()  # built here first: a write cut short must not leave half a zip
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as zf:
        zf.writestr(RUN_RECORD, json.dumps(record))
        if executed is not None:
            # unvalidated as it was read: the grader parses what comes back, strictly
            zf.writestr(EXECUTED, nbformat.v4.nbjson.writes(executed))
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
    skip_slow_optional_imports()  # before nbformat: seconds of every sandbox's start
    skip_format_checkers()
    skip_output_validation()
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
