"""The framework students build across the course (issue 39, item 1): ``mytorch/``, written in
exercise 08 (the tape), grown in exercise 10 (layers, loss, optimizer, a training step) and 11
(a convolution and its layer), and used by the capstone (exercise 24).

What is proven here: the release ships the package with each solution region stubbed by a
NotImplementedError that names the missing piece; a later exercise's check() says which earlier
piece is missing or failing its own check; the course's stand-in for an unfinished engine lets
exercise 10 go on without earning exercise 08's points; the grader reads a checked name that the
notebook imports from the student's package from that package's own files, and nothing else.
(That the reference scores full marks and the release 0 through the grader: the shared graded
course, tests/grading/test_grade.py; nbgrader's autograde with the package beside the notebook:
tests/grading/test_nbgrader_check.py.)
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from fixtures.exercise_helpers import EXERCISES, PACKAGE, SOLUTIONS, solution_package

from edu_dl.grading.nbgrader import enclosing_name, student_module
from edu_dl.grading.trust.files import read_package
from edu_dl.grading.trust.source import SourceReader, find_source

TESTS = Path(__file__).resolve().parents[1]
EX10 = SOLUTIONS / "10_pytorch.ipynb"
STANDIN_TAPE = "from edu_dl.notebook.standin import Tape, backward  # exercise 08 unfinished\n"
STANDIN_FUNCTIONAL = "from edu_dl.notebook.standin import softmax_cross_entropy\n"
STANDIN_GRAPH = "from edu_dl.notebook.standin import topological_order  # exercise 07 unfinished\n"


def test_each_stub_names_the_missing_piece_and_its_file() -> None:
    source = ("import numpy as np\n\n\nclass Tape:\n    def add(self, a, b):\n"
              "        ### BEGIN SOLUTION\n        return a + b\n        ### END SOLUTION\n\n\n"
              "def backward(tape):\n    x = 1\n    ### BEGIN SOLUTION\n    return x\n"
              "    ### END SOLUTION\n")
    released, regions = student_module(source, "mytorch/tape.py")
    assert regions == 2
    assert ("        # YOUR CODE HERE\n        raise NotImplementedError("
            "'Tape.add in mytorch/tape.py is not written yet')") in released
    assert ("    x = 1\n    # YOUR CODE HERE\n    raise NotImplementedError("
            "'backward in mytorch/tape.py is not written yet')\n") in released
    assert "return a + b" not in released and "return x" not in released
    lines = source.split("\n")
    assert enclosing_name(lines, lines.index("        return a + b")) == "Tape.add"
    assert enclosing_name(lines, 0) == ""


def test_the_release_ships_every_module_stubbed_and_runnable() -> None:
    reference, released = read_package(SOLUTIONS / PACKAGE), read_package(EXERCISES / PACKAGE)
    assert sorted(reference) == sorted(released) == [
        "__init__.py", "attention.py", "conv.py", "functional.py", "graph.py", "nn.py", "plan.py",
        "tape.py"]
    for name, data in released.items():
        text = data.decode()
        assert "BEGIN SOLUTION" not in text and "END SOLUTION" not in text, name
        compile(text, name, "exec")  # a student's first import works
        stubs = text.count("raise NotImplementedError(")
        assert stubs == reference[name].decode().count("### BEGIN SOLUTION"), name
    assert b"Linear.__call__ in mytorch/nn.py is not written yet" in released["nn.py"]


def run_in_package(tmp_path: Path, files: dict[str, str], code: str) -> dict[str, str]:
    """``code`` in a fresh interpreter beside a ``mytorch/`` made of ``files`` (the reference's
    modules, unless replaced), with the course's parts beside it as check() finds them; it
    prints a JSON object, returned."""
    package = tmp_path / PACKAGE
    shutil.copytree(SOLUTIONS / PACKAGE, package,
                    ignore=shutil.ignore_patterns("__pycache__"))
    for name, text in files.items():
        (package / name).write_text(text)
    shutil.copytree(SOLUTIONS / "parts", tmp_path / "parts",
                    ignore=shutil.ignore_patterns("__pycache__"))
    prelude = (f"import sys, json\nsys.path[:0] = [{str(tmp_path)!r}, {str(TESTS)!r}]\n"
               "from fixtures import exercise_helpers\n\n\n"
               "def checked(part_id, fn, hidden=False):  # '' for a pass, else the report\n"
               "    ok, text = exercise_helpers.checked(part_id, fn, hidden)\n"
               "    return ok, '' if ok else text.strip()\n\n\n")
    done = subprocess.run([sys.executable, "-c", prelude + code], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.slow  # a fresh interpreter that imports torch
def test_a_later_piece_names_the_earlier_one_it_waits_for(tmp_path: Path) -> None:
    """Exercise 10's Linear on a tape whose matmul is still the release's stub: check() says
    which piece of exercise 08 is missing, in which file."""
    stub = (EXERCISES / PACKAGE / "tape.py").read_text()
    said = run_in_package(tmp_path, {"tape.py": stub}, (
        "from mytorch.nn import Linear, train_step\n"
        "print(json.dumps({'linear': checked('ex10.my_linear', Linear)[1],"
        " 'step': checked('ex10.my_train_step', train_step)[1]}))\n"))
    assert said["linear"] == ("✗ ex10.my_linear: not implemented yet (Tape.matmul in "
                              "mytorch/tape.py is not written yet)"), said
    assert said["step"].startswith("✗ ex10.my_train_step: not implemented yet (Tape."), said


@pytest.mark.slow  # a fresh interpreter that imports torch
def test_a_later_piece_blames_an_earlier_one_that_fails_its_check(tmp_path: Path) -> None:
    """A tape whose matmul VJP forgets a transpose: exercise 10's Linear fails, and check()
    says first that the student's Tape fails its own check (ex08.tape_ops)."""
    tape = (SOLUTIONS / PACKAGE / "tape.py").read_text()
    wrong = tape.replace("lambda g: (g @ w.T, x.T @ g)", "lambda g: (g @ w, x.T @ g)")
    assert wrong != tape
    said = run_in_package(tmp_path, {"tape.py": wrong}, (
        "from mytorch.nn import Linear\n"
        "print(json.dumps({'linear': checked('ex10.my_linear', Linear)[1]}))\n"))
    first = said["linear"].splitlines()[0]
    assert first == ("✗ ex10.my_linear: your `Tape` fails its own check (ex08.tape_ops); "
                     "fix it first"), said


@pytest.mark.slow  # a fresh interpreter that imports torch
def test_the_standin_lets_exercise_10_go_on_and_earns_nothing_of_exercise_08(
        tmp_path: Path) -> None:
    said = run_in_package(tmp_path, {"tape.py": STANDIN_TAPE,
                                     "functional.py": STANDIN_FUNCTIONAL}, (
        "from mytorch.nn import SGD, Linear, cross_entropy, train_step\n"
        "from mytorch.tape import Tape, backward\n"
        "from mytorch.functional import softmax_cross_entropy\n"
        "out = {pid: checked(pid, fn, hidden=True)[1] for pid, fn in ["
        "('ex10.my_linear', Linear), ('ex10.my_cross_entropy', cross_entropy),"
        " ('ex10.my_sgd', SGD), ('ex10.my_train_step', train_step),"
        " ('ex08.tape_ops', Tape), ('ex08.tape_backward', backward),"
        " ('ex08.softmax_cross_entropy', softmax_cross_entropy)]}\n"
        "print(json.dumps(out))\n"))
    for part in ("my_linear", "my_cross_entropy", "my_sgd", "my_train_step"):
        assert said[f"ex10.{part}"] == "", said  # passed
    for part in ("tape_ops", "tape_backward", "softmax_cross_entropy"):
        assert said[f"ex08.{part}"].startswith(f"✗ ex08.{part}: "), said
    assert "is the course's (edu_dl.notebook.standin), not yours" in said["ex08.tape_ops"]


@pytest.mark.slow  # a fresh interpreter
def test_the_standin_order_lets_exercise_12_go_on_and_earns_nothing_of_exercise_07(
        tmp_path: Path) -> None:
    said = run_in_package(tmp_path, {"graph.py": STANDIN_GRAPH}, (
        "from mytorch.graph import topological_order\n"
        "from mytorch.plan import schedule\n"
        "print(json.dumps({'schedule': checked('ex12.my_schedule', schedule, hidden=True)[1],"
        " 'order': checked('ex07.topological_order', topological_order)[1]}))\n"))
    assert said["schedule"] == "", said
    assert said["order"].startswith("✗ ex07.topological_order: the values are right, but "
                                    "`topological_order` is the course's"), said


def test_the_grader_reads_a_checked_name_from_the_students_package() -> None:
    """The trusted side finds Linear's class in mytorch/nn.py's bytes (the notebook only
    imports it); the same import with no package, or a stand-in imported from the course,
    finds nothing, so a source check fails as for a missing def."""
    nb = nbformat.read(EX10, as_version=4)
    package = solution_package()
    found = find_source(nb, "ex10.my_linear", package)
    assert found is not None and found.startswith("class Linear(Module):")
    assert find_source(nb, "ex10.my_train_step", package).startswith("def train_step(")
    assert find_source(nb, "ex10.my_linear") is None  # no package read: nothing to judge
    name, files = package
    standin = {**files, "nn.py": b"from edu_dl.notebook.standin import Tape as Linear\n"}
    assert SourceReader(nb, (name, standin)).find("ex10.my_linear") is None
    # one import further inside the package is followed: nn.py re-exporting layers.py's
    moved = {**files, "layers.py": files["nn.py"],
             "nn.py": b"from mytorch.layers import Linear, train_step\n"}
    assert SourceReader(nb, (name, moved)).find("ex10.my_linear").startswith("class Linear(")
