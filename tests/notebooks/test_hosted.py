"""The first cell of every notebook installs the course on a hosted service, and only there.

The cell runs as a hosted service would run it: in a Python where edu_dl cannot be imported (`python
-S`, no site-packages, from an empty folder), with the service's torch, TensorFlow and NumPy as
installed distributions (their .dist-info folders) at versions of the service's own, and with a
stand-in `pip` package first on PYTHONPATH, which records the command it was given and the
constraints file it was handed (or fails, as asked), and a stand-in `git` first on PATH, whose
"clone" writes a tiny course (the installer the cell runs from the clone, and one part file or this
repository's exercises/parts/) and records the command, or fails as git does without a network.
Where it fails, the cell also runs in IPython, as a notebook shows it. The course is not on PyPI:
nothing is installed, nothing is fetched.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tomllib
from pathlib import Path

import nbformat
import pytest

from edu_dl.notebook import hosted

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = ("lectures", "solutions", "exercises")
with open(ROOT / "pyproject.toml", "rb") as _f:
    REPOSITORY = tomllib.load(_f)["project"]["urls"]["Source"]  # the one place it is written

STAND_IN_PIP = '''\
import json, os, sys
args = sys.argv[1:]
constraints = args[args.index("-c") + 1] if "-c" in args else None
with open(os.environ["PIP_RECORD"], "w") as f:
    json.dump({"args": args, "constraints": open(constraints).read() if constraints else None}, f)
if os.environ.get("PIP_FAIL"):
    print("ERROR: ResolutionImpossible: the service's numpy conflicts", file=sys.stderr)
    sys.exit(1)
'''


STAND_IN_GIT = """#!/bin/sh
# records its arguments; "clone ... DEST" writes a tiny course: the installer the cell runs from
# the clone (COURSE_INSTALLER, this repository's), one exercise part file, or COURSE_PARTS, and
# the students' framework's skeleton (mytorch/), or COURSE_MYTORCH;
# with GIT_FAIL set it fails as git does without a network
printf '%s\\n' "$@" > "$GIT_RECORD"
if [ -n "$GIT_FAIL" ]; then
    echo "Cloning into '/tmp/x/edu-dl'..." >&2
    echo "fatal: unable to access '$GIT_FAIL/': Could not resolve host: github.com" >&2
    exit 128
fi
for last; do :; done
mkdir -p "$last/exercises/parts" "$last/exercises/mytorch" "$last/edu_dl/notebook"
cp "$COURSE_INSTALLER" "$last/edu_dl/notebook/hosted_install.py"
if [ -n "$COURSE_MYTORCH" ]; then
    cp -R "$COURSE_MYTORCH/." "$last/exercises/mytorch/"
else
    echo '# the skeleton' > "$last/exercises/mytorch/__init__.py"
fi
if [ -n "$COURSE_PARTS" ]; then
    cp -R "$COURSE_PARTS/." "$last/exercises/parts/"
else
    echo 'PARTS = []' > "$last/exercises/parts/ex08.py"
fi
"""
# The cell in IPython, as a notebook runs it: what it shows, and whether Run All would go on.
IN_IPYTHON = """\
import sys
from IPython.core.interactiveshell import InteractiveShell
result = InteractiveShell.instance().run_cell(open(sys.argv[1]).read())
print("RUN ALL GOES ON" if result.success else "RUN ALL STOPS")
"""
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def notebooks() -> list[Path]:
    return sorted(p for folder in FOLDERS for p in (ROOT / folder).glob("*.ipynb"))


@pytest.mark.parametrize("path", notebooks(), ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_every_notebook_opens_with_the_install_cell(path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    first = nb.cells[0]
    assert first.cell_type == "code" and first.source == hosted.INSTALL_CELL, (
        f"{path.name}: the first cell is not edu_dl.notebook.hosted.INSTALL_CELL: run "
        f"`python -m edu_dl.notebook.hosted lectures/*.ipynb solutions/*.ipynb`, "
        "then `edu-dl assign`")
    # Collapsed where the notebook opens: JupyterLab hides the source, Colab shows a form.
    assert first.metadata.get("tags") == hosted.TAGS
    assert first.metadata.get("jupyter", {}).get("source_hidden") is True
    assert first.metadata.get("cellView") == "form"
    assert first.source.startswith("#@title ") and '{ display-mode: "form" }' in first.source
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


def cell_env(tmp_path: Path, site: Path, **more: str) -> dict[str, str]:
    """The environment of the service's Python: the stand-in git first on PATH, `site` (the
    stand-in pip, the service's distributions) on PYTHONPATH, and `more` (GIT_FAIL=URL, ...)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "git").write_text(STAND_IN_GIT)
    (bin_dir / "git").chmod(0o755)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PIP_", "PYTHON", "GIT_", "COURSE_"))}
    return env | {"PYTHONPATH": str(site), "PIP_RECORD": str(tmp_path / "pip-record.json"),
                  "GIT_RECORD": str(tmp_path / "git-record.txt"),
                  "IPYTHONDIR": str(tmp_path / "ipython"),
                  "COURSE_INSTALLER": str(ROOT / "edu_dl" / "notebook" / "hosted_install.py"),
                  "PATH": f"{bin_dir}{os.pathsep}{env.get('PATH', '')}", **more}


def run_cell(tmp_path: Path, site: Path, isolated: bool = True, ok: bool = True, **more: str
             ) -> tuple[dict | None, str]:
    """Run the install cell's code in tmp_path/work; return what the stand-in pip recorded (None:
    not called), with the stand-in git's arguments under "git" (None: not called), and what the
    cell printed."""
    record, git_record = tmp_path / "pip-record.json", tmp_path / "git-record.txt"
    cwd = tmp_path / "work"
    cwd.mkdir(exist_ok=True)
    cmd = [sys.executable, *(["-S"] if isolated else []), "-c", hosted.INSTALL_CELL]
    done = subprocess.run(cmd, cwd=cwd, env=cell_env(tmp_path, site, **more),
                          capture_output=True, text=True, timeout=120)
    assert (done.returncode == 0) == ok, done.stderr
    recorded = json.loads(record.read_text()) if record.exists() else None
    if recorded is not None:
        recorded["git"] = git_record.read_text().split() if git_record.exists() else None
    return recorded, done.stdout + done.stderr


def run_cell_in_ipython(tmp_path: Path, site: Path, **more: str) -> tuple[list[str], str]:
    """The cell in IPython (without edu_dl: `python -S` with IPython's site-packages after `site`
    on the path): the lines it shows, and whether Run All would go on."""
    cell = tmp_path / "cell.py"
    cell.write_text(hosted.INSTALL_CELL)
    env = cell_env(tmp_path, site, **more)
    env["PYTHONPATH"] += os.pathsep + sysconfig.get_paths()["purelib"]
    cwd = tmp_path / "work"
    cwd.mkdir(exist_ok=True)
    done = subprocess.run([sys.executable, "-S", "-c", IN_IPYTHON, str(cell)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    lines = [ANSI.sub("", line) for line in done.stdout.splitlines() if line.strip()]
    return lines[:-1], lines[-1]


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
    installed_from_the_clone(recorded, "[caffe]")  # TensorFlow 2.20 accepts protobuf 7
    assert not {"-U", "--upgrade", "--force-reinstall", "--ignore-installed"} & set(args), args
    assert recorded["constraints"].splitlines() == [
        "torch==2.5.1+cu121", "tensorflow==2.20.0", "numpy==2.0.2"]


def test_a_service_without_tensorflow_gets_the_cpu_extra(tmp_path: Path) -> None:
    site = service(tmp_path, {"torch": "2.6.0", "numpy": "2.1.3"})
    recorded, _ = run_cell(tmp_path, site)
    assert recorded is not None
    installed_from_the_clone(recorded, "[cpu,caffe]")
    assert recorded["constraints"].splitlines() == ["torch==2.6.0", "numpy==2.1.3"]


def test_tensorflow_installed_as_tensorflow_cpu_is_kept_too(tmp_path: Path) -> None:
    site = service(tmp_path, {"tensorflow-cpu": "2.20.0"}, modules=("tensorflow",))
    recorded, _ = run_cell(tmp_path, site)
    assert recorded is not None
    installed_from_the_clone(recorded, "[caffe]")
    assert recorded["constraints"].splitlines() == ["tensorflow-cpu==2.20.0"]


def test_an_exercise_gets_the_courses_parts_beside_it(tmp_path: Path) -> None:
    """check() reads parts/ beside the notebook: the cell copies the clone's exercises/parts/."""
    site = service(tmp_path, {"torch": "2.6.0"})
    recorded, _ = run_cell(tmp_path, site)
    assert recorded is not None
    assert (tmp_path / "work" / "parts" / "ex08.py").read_text() == "PARTS = []\n"


def test_a_parts_folder_already_there_is_left_alone(tmp_path: Path) -> None:
    own = tmp_path / "work" / "parts"
    own.mkdir(parents=True)
    (own / "hw1.py").write_text("# the student's own\n")
    recorded, _ = run_cell(tmp_path, service(tmp_path, {"torch": "2.6.0"}))
    assert recorded is not None
    assert sorted(p.name for p in own.iterdir()) == ["hw1.py"]
    # the framework's skeleton came, since no mytorch/ was there
    assert (tmp_path / "work" / "mytorch" / "__init__.py").read_text() == "# the skeleton\n"


def test_the_students_own_framework_is_never_overwritten(tmp_path: Path) -> None:
    """mytorch/ holds the student's work from earlier exercises: a later notebook's install
    cell leaves it as it is."""
    own = tmp_path / "work" / "mytorch"
    own.mkdir(parents=True)
    (own / "tape.py").write_text("# written in exercise 08\n")
    recorded, _ = run_cell(tmp_path, service(tmp_path, {"torch": "2.6.0"}))
    assert recorded is not None
    assert sorted(p.name for p in own.iterdir()) == ["tape.py"]


def test_where_the_course_is_installed_the_cell_does_nothing(tmp_path: Path) -> None:
    """As in `make lab`, nbval and the grader: edu_dl imports, so pip is never called."""
    site = service(tmp_path, {"torch": "2.5.1"})
    recorded, printed = run_cell(tmp_path, site, isolated=False)  # this venv: edu_dl is there
    assert recorded is None and printed == ""


def test_the_repository_is_written_once_in_pyproject() -> None:
    """hosted.py reads it from the installed metadata: a fork sets it in pyproject.toml alone."""
    assert hosted.repository() == hosted.REPOSITORY == REPOSITORY
    assert f'REPOSITORY = "{REPOSITORY}"' in hosted.INSTALL_CELL
    assert "github.com" not in Path(hosted.__file__).read_text(), "a URL written in hosted.py"


@pytest.mark.parametrize(("tensorflow", "extra"), [
    (None, "[cpu,caffe]"), ("2.20.0", "[caffe]"), ("2.21.0", "[caffe]"), ("2.19.0", ""),
    ("2.15.1", "")])
def test_protobuf_7_only_where_tensorflow_accepts_it(tmp_path: Path, tensorflow: str | None,
                                                     extra: str) -> None:
    """The `caffe` extra (protobuf 7) beside no TensorFlow or one of 2.20 and later; beside an
    older one the service keeps its protobuf (tests/install/test_install.py asks pip's resolver)."""
    dists = {"torch": "2.6.0"} | ({"tensorflow": tensorflow} if tensorflow else {})
    site = service(tmp_path, dists, modules=("tensorflow",) if tensorflow else ())
    recorded, _ = run_cell(tmp_path, site)
    assert recorded is not None
    installed_from_the_clone(recorded, extra)


def test_a_failed_clone_ends_with_one_sentence_naming_the_repository(tmp_path: Path) -> None:
    site = service(tmp_path, {"torch": "2.6.0"})
    recorded, printed = run_cell(tmp_path, site, ok=False, GIT_FAIL=REPOSITORY)
    assert recorded is None, "pip ran after git failed"
    last = printed.strip().splitlines()[-1]
    assert last.startswith("CourseNotInstalled: could not download the course from "
                           f"{REPOSITORY} (fatal: unable to access"), printed
    assert "Could not resolve host" in last and "run this cell again" in last
    assert "CalledProcessError" not in printed


def test_a_notebook_shows_a_failed_clone_as_one_sentence_and_run_all_stops(
        tmp_path: Path) -> None:
    shown, run_all = run_cell_in_ipython(tmp_path, service(tmp_path, {"torch": "2.6.0"}),
                                         GIT_FAIL=REPOSITORY)
    assert len(shown) == 1, "\n".join(shown)  # no traceback, no CalledProcessError
    assert shown[0].startswith("CourseNotInstalled: could not download the course from "
                               f"{REPOSITORY} ("), shown
    assert shown[0].endswith("then run this cell again")
    assert run_all == "RUN ALL STOPS"  # not ModuleNotFoundError in every later cell


def test_the_ipython_check_sees_a_cell_that_goes_on(tmp_path: Path) -> None:
    """Control: where the clone works, the same run shows no sentence and Run All goes on."""
    shown, run_all = run_cell_in_ipython(tmp_path, service(tmp_path, {"torch": "2.6.0"}))
    assert not any("CourseNotInstalled" in line for line in shown), shown
    assert run_all == "RUN ALL GOES ON"


def test_a_failed_install_ends_with_one_sentence_naming_the_repository(tmp_path: Path) -> None:
    site = service(tmp_path, {"torch": "2.6.0"})
    recorded, printed = run_cell(tmp_path, site, ok=False, PIP_FAIL="1")
    assert recorded is not None  # pip ran, and failed
    lines = printed.strip().splitlines()
    assert "ResolutionImpossible" in printed  # pip's own messages stay above the sentence
    assert lines[-1] == (
        f"CourseNotInstalled: pip could not install the course from {REPOSITORY} (its messages "
        "are above): restart the runtime and run this cell again, and if it fails again, report "
        f"pip's last lines at {REPOSITORY}/issues")
    assert not (tmp_path / "work" / "parts").exists()


@pytest.mark.slow
def test_validating_on_a_hosted_service_grades_as_at_home(tmp_path: Path) -> None:
    """The README's path on Colab or Kaggle: the cell leaves parts/ and mytorch/ beside the
    notebook, the student uploads the saved notebook into that folder and runs `!edu-dl
    validate NAME` there. It grades the same rows as `edu-dl validate` on the repository's own
    exercises/."""
    name = "08_autograd_from_scratch.ipynb"
    recorded, _ = run_cell(tmp_path, service(tmp_path, {"torch": "2.6.0"}),
                           COURSE_PARTS=str(ROOT / "exercises" / "parts"),
                           COURSE_MYTORCH=str(ROOT / "exercises" / "mytorch"))
    assert recorded is not None
    work = tmp_path / "work"
    shutil.copy(ROOT / "exercises" / name, work / name)  # the student's upload
    edu_dl = str(Path(sys.executable).with_name("edu-dl"))  # installed, as the cell's pip does

    def rows(folder: Path) -> list[str]:
        done = subprocess.run([edu_dl, "validate", name], cwd=folder, capture_output=True,
                              text=True, timeout=600)
        assert done.returncode in (0, 1), done.stdout + done.stderr
        return [line.strip() for line in done.stdout.splitlines()
                if line.strip().startswith(("✓", "✗"))]

    hosted_rows = rows(work)
    assert hosted_rows and any("ex08.mul_backward" in row for row in hosted_rows), hosted_rows
    assert hosted_rows == rows(ROOT / "exercises")


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


def test_refreshing_an_older_cell_changes_its_text_and_metadata_only() -> None:
    """Lectures and solutions are committed executed: the new cell must not touch an output."""
    v4 = nbformat.v4
    old = v4.new_code_cell(hosted.FORMER_MARKS[0] + ": install the course\nimport os",
                           execution_count=1, metadata={"tags": list(hosted.TAGS)})
    rest = v4.new_code_cell("1 + 1", execution_count=2, outputs=[
        v4.new_output("execute_result", {"text/plain": "2"}, execution_count=2)])
    nb = v4.new_notebook(cells=[old, rest])
    before = json.loads(json.dumps(nb.cells[1]))
    assert hosted.add_install_cell(nb)
    assert len(nb.cells) == 2 and nb.cells[0].source == hosted.INSTALL_CELL
    assert nb.cells[0].execution_count == 1 and nb.cells[0].metadata["cellView"] == "form"
    assert nb.cells[1] == before
    nbformat.validate(nb)


def test_the_installer_needs_nothing_but_the_standard_library() -> None:
    """The cell runs it from the clone before the course is installed: an import of edu_dl or of
    any third-party package there would fail on every hosted service."""
    import ast

    from edu_dl.notebook import hosted_install

    tree = ast.parse(Path(hosted_install.__file__).read_text())
    imported = {alias.name.split(".")[0] for node in ast.walk(tree)
                if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module.split(".")[0] for node in ast.walk(tree)
                 if isinstance(node, ast.ImportFrom) and node.module}
    assert imported and imported <= set(sys.stdlib_module_names) | {"__future__"}, \
        imported - set(sys.stdlib_module_names)
