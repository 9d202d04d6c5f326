"""The first cell of every notebook installs the course on a hosted service, and only there.

The cell runs as a hosted service would run it: in a Python where edu_dl cannot be imported
(`python -S`, no site-packages, from an empty folder), with the service's torch, TensorFlow and
NumPy as installed distributions (their .dist-info folders) at versions of the service's own, and
with a stand-in `pip` package first on PYTHONPATH, which records the command it was given and the
constraints file it was handed, and a stand-in `git` first on PATH, whose "clone" writes a tiny
course (one part file) and records the command. The course is not on PyPI: nothing is installed,
nothing is fetched.
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
REPOSITORY = "https://github.com/edu-dl/edu-dl"

STAND_IN_PIP = '''\
import json, os, sys
args = sys.argv[1:]
constraints = args[args.index("-c") + 1] if "-c" in args else None
with open(os.environ["PIP_RECORD"], "w") as f:
    json.dump({"args": args, "constraints": open(constraints).read() if constraints else None}, f)
'''


STAND_IN_GIT = """#!/bin/sh
# records its arguments; "clone ... DEST" writes a tiny course with one exercise part file
printf '%s\\n' "$@" > "$GIT_RECORD"
for last; do :; done
mkdir -p "$last/exercises/parts"
echo 'PARTS = []' > "$last/exercises/parts/ex05.py"
"""


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
    """Run the install cell's code in tmp_path/work; return what the stand-in pip recorded (None:
    not called), with the stand-in git's arguments under "git" (None: not called)."""
    record, git_record = tmp_path / "pip-record.json", tmp_path / "git-record.txt"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "git").write_text(STAND_IN_GIT)
    (bin_dir / "git").chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "PYTHON"))}
    env |= {"PYTHONPATH": str(site), "PIP_RECORD": str(record), "GIT_RECORD": str(git_record),
            "PATH": f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"}
    cwd = tmp_path / "work"
    cwd.mkdir(exist_ok=True)
    cmd = [sys.executable, *(["-S"] if isolated else []), "-c", hosted.INSTALL_CELL]
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    recorded = json.loads(record.read_text()) if record.exists() else None
    if recorded is not None:
        recorded["git"] = git_record.read_text().split() if git_record.exists() else None
    return recorded, done.stdout + done.stderr


def installed_from_the_clone(recorded: dict, extra: str = "") -> None:
    """pip installed the directory git cloned the course's repository into (with the extra)."""
    git = recorded["git"]
    assert git is not None and git[:1] == ["clone"] and REPOSITORY in git, git
    assert recorded["args"][-1] == git[-1] + extra, (recorded["args"], git)


def test_a_service_with_torch_and_tensorflow_gets_the_course_and_keeps_them(tmp_path: Path) -> None:
    site = service(tmp_path, {"torch": "2.5.1+cu121", "tensorflow": "2.20.0", "numpy": "2.0.2"},
                   modules=("tensorflow",))
    recorded, _ = run_cell(tmp_path, site)
    assert recorded is not None, "edu_dl is missing, yet the cell did not call pip"
    args = recorded["args"]
    assert args[0] == "install", args
    installed_from_the_clone(recorded)
    assert not {"-U", "--upgrade", "--force-reinstall", "--ignore-installed"} & set(args), args
    assert recorded["constraints"].splitlines() == [
        "torch==2.5.1+cu121", "tensorflow==2.20.0", "numpy==2.0.2"]


def test_a_service_without_tensorflow_gets_the_cpu_extra(tmp_path: Path) -> None:
    site = service(tmp_path, {"torch": "2.6.0", "numpy": "2.1.3"})
    recorded, _ = run_cell(tmp_path, site)
    assert recorded is not None
    installed_from_the_clone(recorded, "[cpu]")
    assert recorded["constraints"].splitlines() == ["torch==2.6.0", "numpy==2.1.3"]


def test_tensorflow_installed_as_tensorflow_cpu_is_kept_too(tmp_path: Path) -> None:
    site = service(tmp_path, {"tensorflow-cpu": "2.20.0"}, modules=("tensorflow",))
    recorded, _ = run_cell(tmp_path, site)
    assert recorded is not None
    installed_from_the_clone(recorded)
    assert recorded["constraints"].splitlines() == ["tensorflow-cpu==2.20.0"]


def test_an_exercise_gets_the_courses_parts_beside_it(tmp_path: Path) -> None:
    """check() reads parts/ beside the notebook: the cell copies the clone's exercises/parts/."""
    site = service(tmp_path, {"torch": "2.6.0"})
    recorded, _ = run_cell(tmp_path, site)
    assert recorded is not None
    assert (tmp_path / "work" / "parts" / "ex05.py").read_text() == "PARTS = []\n"


def test_a_parts_folder_already_there_is_left_alone(tmp_path: Path) -> None:
    own = tmp_path / "work" / "parts"
    own.mkdir(parents=True)
    (own / "hw1.py").write_text("# the student's own\n")
    recorded, _ = run_cell(tmp_path, service(tmp_path, {"torch": "2.6.0"}))
    assert recorded is not None
    assert sorted(p.name for p in own.iterdir()) == ["hw1.py"]


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
