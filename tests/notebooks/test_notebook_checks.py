"""The notebook checks bite: break one op of the engine, and nbval fails on a lecture that uses it.

`make test-notebooks` runs the lectures with nbval and compares the outputs of the cells marked
tagged `nbval-check-output` with the committed ones. That is only worth something if a wrong engine
changes those outputs. Here relu's backward (edu_dl.autograd.ops.ReLU.backward) is broken inside the
notebook's kernel, the classic bug: it forgets relu's mask and lets every gradient through. The same
nbval run that passes on the intact engine (in `make test-notebooks`) must then fail, with "Cell
outputs differ" in a checked cell, not with an exception.

The bug is injected from outside the notebook: a sitecustomize.py on PYTHONPATH, which every Python
process imports at start-up, including the kernel that nbval starts (it inherits the environment).
It patches ReLU.backward only when BREAK_VAR is set, and the patched backward writes a marker file
the first time it runs, which proves that the broken rule really ran in the kernel.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[2]
# The lecture on edu_dl's engine: it trains a two-layer ReLU network with edu_dl.nn and checks the
# losses at chosen steps. (10_pytorch.ipynb would do too, edu_dl against PyTorch, but runs longer.)
LECTURE = ROOT / "lectures" / "08_autograd_from_scratch.ipynb"
CHECK_TAG = "nbval-check-output"
BREAK_VAR = "EDU_DL_BREAK_RELU_BACKWARD"

SITECUSTOMIZE = f'''\
"""Test-only: break edu_dl's relu backward in this process when {BREAK_VAR} names a marker file."""
import os

_marker = os.environ.get("{BREAK_VAR}")
if _marker:
    from edu_dl.autograd import ops

    def _broken_backward(self, grad):
        """relu's VJP without its mask: every gradient flows through, also where x <= 0."""
        if not os.path.exists(_marker):
            with open(_marker, "w") as f:
                f.write(f"broken ReLU.backward ran in process {{os.getpid()}}\\n")
        return (grad,)

    ops.ReLU.backward = _broken_backward
'''


def run_nbval(notebook: Path, env: dict[str, str]) -> tuple[int, str, dict[str, str]]:
    """Run nbval on one notebook in a fresh pytest process: (exit code, output, failures).

    failures maps the failed item ('Cell 15') to the failure text nbval reported for it.
    """
    junit = notebook.with_suffix(".junit.xml")
    cmd = [sys.executable, "-m", "pytest", "--nbval-lax", "--nbval-current-env",
           "-p", "no:cacheprovider", "-p", "no:randomly", "-q", f"--junitxml={junit}",
           notebook.name]
    proc = subprocess.run(cmd, cwd=notebook.parent, env=env, capture_output=True, text=True,
                          timeout=1200, check=False)
    failures = {}
    if junit.exists():
        for case in ET.parse(junit).iter("testcase"):
            for bad in (*case.iter("failure"), *case.iter("error")):
                failures[case.get("name", "?")] = (bad.get("message") or "") + (bad.text or "")
    return proc.returncode, proc.stdout + proc.stderr, failures


@pytest.mark.slow
def test_nbval_catches_a_broken_relu_backward(tmp_path: Path) -> None:
    """The intact engine's run is `make test-notebooks`' own (this lecture, the same nbval): it
    is not run again here. What could make this run fail for another reason than the bug (the
    injected sitecustomize.py, the copy) is ruled out below: every failure must be a checked
    cell's outputs differing, at or after the first cell that uses relu."""
    assert LECTURE.exists(), f"{LECTURE.name} is gone: point LECTURE at a lecture using edu_dl relu"
    work = tmp_path / "lecture"
    work.mkdir()
    notebook = Path(shutil.copy(LECTURE, work))
    inject = tmp_path / "inject"
    inject.mkdir()
    (inject / "sitecustomize.py").write_text(SITECUSTOMIZE)
    marker = tmp_path / "broken_relu_ran.txt"

    env = {k: v for k, v in os.environ.items() if k != BREAK_VAR}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(inject), env.get("PYTHONPATH")]))
    env["TQDM_DISABLE"] = "1"  # progress bars print rates; `make test-notebooks` sets it too
    env[BREAK_VAR] = str(marker)

    code, output, failures = run_nbval(notebook, env)
    tail = output[-6000:]

    assert marker.exists(), f"the broken relu backward never ran in the kernel:\n{tail}"
    assert code == 1, f"nbval did not fail with relu's backward broken (exit {code}):\n{tail}"
    assert failures, tail
    print(f"with relu's backward broken, nbval failed on {sorted(failures)}")
    cells = [c for c in nbformat.read(notebook, as_version=4).cells if c.cell_type == "code"]
    uses_relu = [i for i, c in enumerate(cells) if "relu" in c.source.lower()]
    assert uses_relu, f"{LECTURE.name} no longer uses relu: point LECTURE at a lecture that does"
    for name, text in failures.items():
        index = int(name.removeprefix("Cell "))  # nbval counts code cells from 0
        assert "Cell outputs differ" in text, f"{name} failed otherwise than by a mismatch:\n{text}"
        tags = cells[index].metadata.get("tags", [])
        assert CHECK_TAG in tags, f"{name} is not checked, yet it failed"
        assert index >= uses_relu[0], f"{name} fails before any cell uses relu:\n{text}"
