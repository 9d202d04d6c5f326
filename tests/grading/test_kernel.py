"""The runner and its kernel (edu_dl/grading/runner.py, kernel.py): what a notebook's cells show,
as Jupyter's client and kernel would record it, and what a cell cannot break.

Each test runs the runner's file on a notebook outside any sandbox (``--result FILE``), as the
sandbox runs it; grading through the sandbox is tests/grading/test_grade.py's and hostile/'s.
"""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest

from edu_dl.grading import runner
from edu_dl.grading.trust.errors import failing_line

CAP = 100_000  # bytes of output kept (--output-cap)


def run(tmp_path: Path, *sources: str, timeout: float = 10,
        extra: tuple[str, ...] = ()) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(run.json, the executed notebook's cells) of a notebook of these code cells."""
    cells = [{"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None,
              "source": source} for source in sources]
    nb = {"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    (tmp_path / "n.ipynb").write_text(json.dumps(nb))
    subprocess.run([sys.executable, "-P", runner.__file__, str(tmp_path / "n.ipynb"),
                    str(tmp_path / "g"), "--result", str(tmp_path / "r.zip"),
                    "--timeout", f"{timeout:g}", "--output-cap", str(CAP), *extra],
                   check=True, timeout=120, capture_output=True, cwd=tmp_path)
    with zipfile.ZipFile(tmp_path / "r.zip") as zf:
        record = json.loads(zf.read("run.json"))
        executed = json.loads(zf.read("executed.ipynb"))
    return record, executed["cells"]


def kinds(cell: dict[str, Any]) -> list[str]:
    return [o.get("name", o["output_type"]) for o in cell["outputs"]]


def test_outputs_come_in_order_with_their_kinds_and_counts(tmp_path: Path) -> None:
    """Streams, displays, the result and the error of a cell, in the order the cell made them;
    text that C code or a child process writes to the descriptors is the cell's too; an empty
    cell is not run (no count), as nbclient skips it."""
    record, cells = run(
        tmp_path,
        "print('a')\nfrom IPython.display import display\ndisplay({'k': 1}, raw=True)\n"
        "print('b')\n6 * 7",
        "   \n",
        "import os, subprocess, sys\nprint('to err', file=sys.stderr)\n"
        "os.write(1, b'fd one\\n')\nsubprocess.run(['echo', 'child'])\n"
        "raise ValueError('boom')",
    )
    first, empty, last = cells
    assert kinds(first) == ["stdout", "display_data", "stdout", "execute_result"], first
    assert first["outputs"][0]["text"] == "a\n" and first["outputs"][2]["text"] == "b\n"
    assert first["outputs"][1]["data"] == {"k": 1}
    assert first["outputs"][3]["data"]["text/plain"] == "42"
    assert (first["execution_count"], empty["execution_count"], last["execution_count"]) == \
        (1, None, 2)
    assert first["outputs"][3]["execution_count"] == 1
    text = "".join(o.get("text", "") for o in last["outputs"] if o.get("name") == "stdout")
    assert "fd one\n" in text and "child\n" in text, last
    error = last["outputs"][-1]
    assert (error["output_type"], error["ename"], error["evalue"]) == \
        ("error", "ValueError", "boom")
    # the line that raised, as the grader reads it from the traceback (trust/errors.py)
    assert failing_line(error["traceback"], 2) == 5, error
    assert [c["status"] for c in record["cells"]] == ["ok", "ok", "error"]
    assert [c["stderr"] for c in record["cells"]] == [False, False, True]


@pytest.mark.waits
def test_a_cell_over_its_timeout_is_interrupted_and_the_next_cell_runs(tmp_path: Path) -> None:
    record, cells = run(tmp_path, "import time\nwhile True:\n    time.sleep(0.05)",
                        "print('after')", timeout=3)  # the second cell's too, on a busy machine
    assert [c["status"] for c in record["cells"]] == ["timeout", "ok"], record
    assert cells[0]["outputs"][-1]["ename"] == "KeyboardInterrupt", cells[0]
    assert cells[1]["outputs"][0]["text"] == "after\n"
    assert record["kernel"] == "ok"


@pytest.mark.waits
def test_a_cell_that_ignores_interrupts_leaves_the_kernel_stuck(tmp_path: Path) -> None:
    record, _ = run(tmp_path, "import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)"
                    "\nwhile True:\n    time.sleep(0.05)", "print('never')", timeout=1)
    assert record["kernel"] == "stuck", record
    assert [c["status"] for c in record["cells"]] == ["timeout", "not run"]


def test_floods_are_cut_and_stopped_and_long_text_keeps_its_characters(tmp_path: Path) -> None:
    """One write of megabytes travels in frames cut at byte boundaries, and no character is
    broken by a cut; beyond the cap output is dropped, and a cell printing FLOOD times the cap
    is interrupted (its KeyboardInterrupt kept: errors always are); the next cell still runs."""
    record, cells = run(tmp_path, "print('é' * 600_000)",
                        "while True:\n    print('x' * 10_000)", "print('still here')")
    assert record["output_cut"] is True
    assert [c["status"] for c in record["cells"]] == ["ok", "error", "ok"], record
    assert "interrupted" in record["cells"][1]["error"]
    # 1.2 MB: over the cap of 100 kB, dropped whole; so is all later output but errors
    assert cells[0]["outputs"] == [] and cells[2]["outputs"] == []
    assert cells[1]["outputs"][-1]["ename"] == "KeyboardInterrupt"
    _, cells = run(tmp_path, "print('é' * 30_000)", extra=())
    assert cells[0]["outputs"][0]["text"] == "é" * 30_000 + "\n"


def test_forked_children_and_threads_print_into_the_cell(tmp_path: Path) -> None:
    _, cells = run(tmp_path, "import os, threading\n"
                   "t = threading.Thread(target=print, args=('thread',)); t.start(); t.join()\n"
                   "pid = os.fork()\nif pid == 0:\n    print('child', flush=True)\n"
                   "    os._exit(0)\nos.waitpid(pid, 0)\nprint('parent')")
    text = "".join(o["text"] for o in cells[0]["outputs"])
    assert sorted(text.split()) == ["child", "parent", "thread"], cells[0]


@pytest.mark.parametrize("garbage", [
    b"Z" + bytes(40),  # a frame of no kind the runner knows
    b"j" + (2**31).to_bytes(4, "big") + b"x" * 1000,  # over MAX_FRAME
    b"j\0\0\0\x05[1,2]j\0\0\0\x02{}j\0\0\0\x03{x}",  # JSON of no message, or none
    b"j\0\x01\x86\xa0" + b"[" * 100_000,  # nested deeper than json can parse
])
def test_what_a_cell_writes_on_the_runners_pipe_costs_only_its_own_run(
        tmp_path: Path, garbage: bytes) -> None:
    """The frames' pipe is the student's to write on: a frame of an unknown kind or over
    MAX_FRAME ends the kernel (the run is recorded as died); a frame of no known message is
    dropped. Either way the runner writes its record."""
    record, cells = run(tmp_path, f"import os, sys\nos.write(sys.stdout.channel.fd, {garbage!r})",
                        "print('next')", timeout=5)
    if garbage[:1] == b"j" and garbage[1:5] != (2**31).to_bytes(4, "big"):
        assert record["kernel"] == "ok", record
        assert cells[1]["outputs"][0]["text"] == "next\n"
    else:
        assert record["kernel"] == "died" and "protocol" in record["message"], record
        assert [c["status"] for c in record["cells"]] == ["died", "not run"], record


def test_the_kernel_never_sends_a_frame_the_runner_refuses(tmp_path: Path) -> None:
    """A display of 70 MB leaves a line saying so, not a broken kernel."""
    from edu_dl.grading import kernel, kernel_client

    assert kernel.MAX_FRAME == kernel_client.MAX_FRAME
    assert kernel.HEADER.size == kernel_client.HEADER_SIZE
    record, cells = run(tmp_path, "from IPython.display import display\n"
                        "display({'text/plain': 'x' * (70 << 20)}, raw=True)", "print('next')")
    assert record["kernel"] == "ok", record
    assert "too large to return" in cells[0]["outputs"][0]["data"]["text/plain"]


def test_the_gate_and_the_budget_still_bound_the_run(tmp_path: Path) -> None:
    record, _ = run(tmp_path, "import time\ntime.sleep(3)", "print(1)", timeout=10,
                    extra=("--budget", "2"))
    assert record["cells"][0]["status"] == "timeout", record
    assert record["kernel"] == "budget" and record["cells"][1]["status"] == "not run", record


def test_over_the_cap_a_cell_keeps_one_error_and_no_display_update(tmp_path: Path) -> None:
    """Errors are kept over the output cap, as they say what went wrong, but one per cell:
    a loop of them cannot grow the runner; an update of an earlier display over the cap is
    dropped like any output."""
    record, cells = run(
        tmp_path,
        "from IPython.display import display\n"
        "handle = display({'text/plain': 'first'}, raw=True, display_id=True)",
        "print('x' * 200_000)\n"
        "for i in range(100):\n    try:\n        raise ValueError(i)\n"
        "    except ValueError:\n        get_ipython().showtraceback()\n"
        "handle.update({'text/plain': 'second'}, raw=True)")
    assert record["output_cut"] is True
    assert cells[0]["outputs"][0]["data"] == {"text/plain": "first"}, cells[0]
    assert [o["output_type"] for o in cells[1]["outputs"]] == ["error"], cells[1]
    assert cells[1]["outputs"][0]["evalue"] == "0"
