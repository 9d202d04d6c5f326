"""The first cell of every notebook installs the course on a hosted service, and only there.

The cell runs as a hosted service would run it: in a Python where edu_dl cannot be imported
(`python -S`, no site-packages, from an empty folder), with the service's torch, TensorFlow and
NumPy as installed distributions (their .dist-info folders) at versions of the service's own, and
with a stand-in `pip` package first on PYTHONPATH, which records the command it was given and the
constraints file it was handed. The course is not on PyPI: nothing is installed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from edu_dl import hosted

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("lectures", "solutions", "exercises")
COURSE = "edu-dl @ git+https://github.com/edu-dl/edu-dl"

STAND_IN_PIP = '''\
import json, os, sys
args = sys.argv[1:]
constraints = args[args.index("-c") + 1] if "-c" in args else None
with open(os.environ["PIP_RECORD"], "w") as f:
    json.dump({"args": args, "constraints": open(constraints).read() if constraints else None}, f)
'''


def notebooks() -> list[Path]:
    return sorted(p for folder in FOLDERS for p in (ROOT / folder).glob("*.ipynb"))


@pytest.mark.parametrize("path", notebooks(), ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_every_notebook_opens_with_the_install_cell(path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    first = nb.cells[0]
    assert first.cell_type == "code" and first.source == hosted.INSTALL_CELL, (
        f"{path.name}: the first cell is not edu_dl.hosted.INSTALL_CELL: run "
        f"`python -m edu_dl.hosted lectures/*.ipynb solutions/*.ipynb`, then `edu-dl assign`")
    assert first.metadata.get("tags") == hosted.TAGS
    assert sum(hosted.is_install_cell(c) for c in nb.cells) == 1
    if path.parent.name != "exercises":  # executed notebooks: it printed nothing
        assert first.outputs == [] and first.execution_count == 1


def service(tmp_path: Path, dists: dict[str, str], modules: tuple[str, ...] = ()) -> Path:
    """A folder for PYTHONPATH: the stand-in pip, installed distributions, importable modules."""
    site = tmp_path / "site"
    (site / "pip").mkdir(parents=True)
    (site / "pip" / "__init__.py").write_text("")
    (site / "pip" / "__main__.py").write_text(STAND_IN_PIP)
    for name, version in dists.items():
        info = site / f"{name.replace('-', '_')}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    for module in modules:
        (site / module).mkdir()
        (site / module / "__init__.py").write_text("")
    return site


def run_cell(tmp_path: Path, site: Path, isolated: bool = True) -> tuple[dict | None, str]:
    """Run the install cell's code; return what the stand-in pip recorded (None: not called)."""
    record = tmp_path / "pip-record.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "PYTHON"))}
    env |= {"PYTHONPATH": str(site), "PIP_RECORD": str(record)}
    cwd = tmp_path / "work"
    cwd.mkdir(exist_ok=True)
    cmd = [sys.executable, *(["-S"] if isolated else []), "-c", hosted.INSTALL_CELL]
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return (json.loads(record.read_text()) if record.exists() else None), done.stdout + done.stderr


def test_a_service_with_torch_and_tensorflow_gets_the_course_and_keeps_them(tmp_path: Path) -> None:
    site = service(tmp_path, {"torch": "2.5.1+cu121", "tensorflow": "2.20.0", "numpy": "2.0.2"},
                   modules=("tensorflow",))
    recorded, _ = run_cell(tmp_path, site)
    assert recorded is not None, "edu_dl is missing, yet the cell did not call pip"
    args = recorded["args"]
    assert args[0] == "install" and args[-1] == COURSE, args
    assert not {"-U", "--upgrade", "--force-reinstall", "--ignore-installed"} & set(args), args
    assert recorded["constraints"].splitlines() == [
        "torch==2.5.1+cu121", "tensorflow==2.20.0", "numpy==2.0.2"]


def test_a_service_without_tensorflow_gets_the_cpu_extra(tmp_path: Path) -> None:
    site = service(tmp_path, {"torch": "2.6.0", "numpy": "2.1.3"})
    recorded, _ = run_cell(tmp_path, site)
    assert recorded is not None
    assert recorded["args"][-1] == COURSE.replace("edu-dl", "edu-dl[cpu]", 1)
    assert recorded["constraints"].splitlines() == ["torch==2.6.0", "numpy==2.1.3"]


def test_tensorflow_installed_as_tensorflow_cpu_is_kept_too(tmp_path: Path) -> None:
    site = service(tmp_path, {"tensorflow-cpu": "2.20.0"}, modules=("tensorflow",))
    recorded, _ = run_cell(tmp_path, site)
    assert recorded is not None
    assert recorded["args"][-1] == COURSE
    assert recorded["constraints"].splitlines() == ["tensorflow-cpu==2.20.0"]


def test_where_the_course_is_installed_the_cell_does_nothing(tmp_path: Path) -> None:
    """As in `make lab`, nbval and the grader: edu_dl imports, so pip is never called."""
    site = service(tmp_path, {"torch": "2.5.1"})
    recorded, printed = run_cell(tmp_path, site, isolated=False)  # this venv: edu_dl is there
    assert recorded is None and printed == ""


def test_add_install_cell_renumbers_an_executed_notebook_once() -> None:
    v4 = nbformat.v4
    nb = v4.new_notebook(cells=[v4.new_markdown_cell("# Title"),
                                v4.new_code_cell("1 + 1", execution_count=1, outputs=[
                                    v4.new_output("execute_result", {"text/plain": "2"},
                                                  execution_count=1)]),
                                v4.new_code_cell("print(3)", execution_count=2)])
    assert hosted.add_install_cell(nb)
    assert [c.get("execution_count") for c in nb.cells] == [1, None, 2, 3]
    assert nb.cells[2].outputs[0].execution_count == 2
    assert not hosted.add_install_cell(nb), "a second run must change nothing"
    assert [c.get("execution_count") for c in nb.cells] == [1, None, 2, 3]
    nbformat.validate(nb)
