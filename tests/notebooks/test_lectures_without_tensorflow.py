"""A missing framework degrades a lecture, it never breaks it.

On a GPU machine without TensorFlow, lecture 16's MirroredStrategy cell once raised and three later
cells failed with NameError. Here every lecture that reaches TensorFlow (a direct import, a
`%%needs tensorflow` cell or a `framework_missing("tensorflow")` question: `reaches_tensorflow`)
runs top to bottom in a kernel where TensorFlow and
Keras are not installed, as far as Python can tell: a sitecustomize.py on PYTHONPATH wraps the path
finder so that `importlib.util.find_spec("tensorflow")` is None and `import tensorflow` raises
ModuleNotFoundError, exactly as without the package. No cell may raise, and a lecture that uses
TensorFlow must say in a sentence what it skipped.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from fixtures.hidden_packages import hide, run_lecture

ROOT = Path(__file__).resolve().parents[2]
LECTURES = sorted(ROOT.glob("lectures/*.ipynb"))
BLOCKED = ("tensorflow", "keras", "tf_keras")



TF_IMPORT = re.compile(r"^\s*(?:import|from)\s+(?:tensorflow|keras)\b", re.MULTILINE)
# The other two ways a lecture reaches TensorFlow: a cell that starts with `%%needs tensorflow`, and
# a question to the package (`framework_missing("tensorflow")`) before a helper that imports it,
# as lecture 16 asks before the package's MirroredStrategy helper.
NEEDS_TF = re.compile(r"\A%%needs\b[^\n]*\btensorflow\b")
ASKS_FOR_TF = re.compile(r"framework_missing\(\s*[\'\"]tensorflow[\'\"]")


def uses_tensorflow(nb: nbformat.NotebookNode) -> bool:
    return any(c.cell_type == "code" and TF_IMPORT.search(c.source) for c in nb.cells)


def reaches_tensorflow(nb: nbformat.NotebookNode) -> bool:
    """Does a lecture reach TensorFlow: a direct import, a `%%needs tensorflow` cell, or a
    `framework_missing("tensorflow")` question? Only those lectures run again without it."""
    return any(c.cell_type == "code" and (TF_IMPORT.search(c.source) or NEEDS_TF.search(c.source)
                                          or ASKS_FOR_TF.search(c.source)) for c in nb.cells)


REACHING = [p for p in LECTURES if reaches_tensorflow(nbformat.read(p, as_version=4))]


@pytest.mark.parametrize(("source", "reaches"), [
    ("import tensorflow as tf", True), ("from keras import layers", True),
    ("%%needs tensorflow\nx = 1", True), ("%%needs torch tensorflow\nx = 1", True),
    ("if framework_missing('tensorflow'):\n    print('skip')", True),
    ('gone = framework_missing("tensorflow")', True),
    ("import torch  # tensorflow is not used here", False), ("x = 'tensorflow'", False),
    ("%%needs torch\nx = 1", False), ("framework_missing('torch')", False),
])
def test_which_lectures_reach_tensorflow(source: str, reaches: bool) -> None:
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("import tensorflow"),
                                         nbformat.v4.new_code_cell(source)])
    assert reaches_tensorflow(nb) is reaches


def test_the_lectures_that_reach_tensorflow_are_found() -> None:
    """The rule finds the lectures on TensorFlow and the one that reaches it through the package."""
    stems = {p.stem for p in REACHING}
    assert {"09_tensorflow", "16_many_devices"} <= stems, stems
    assert len(stems) < len(LECTURES), "every lecture selected: the rule no longer selects"


@pytest.fixture(scope="session")  # see tests/README.md: "Fixtures"
def hidden_tensorflow(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return hide(tmp_path_factory.mktemp("no_tensorflow"), BLOCKED,
                dict(os.environ, TQDM_DISABLE="1", MPLBACKEND="Agg"))


def test_the_block_works(hidden_tensorflow: dict[str, str]) -> None:
    code = ("import importlib.util\nassert importlib.util.find_spec('tensorflow') is None\n"
            "try:\n    import tensorflow\nexcept ModuleNotFoundError as e:\n    print(e)\n"
            "import numpy, torch\nprint('others fine')")
    out = subprocess.run([sys.executable, "-c", code], env=hidden_tensorflow, capture_output=True,
                         text=True, timeout=120, check=True).stdout
    assert out == "No module named 'tensorflow'\nothers fine\n"


@pytest.mark.slow
@pytest.mark.parametrize("path", REACHING, ids=lambda p: p.stem)
def test_lecture_runs_without_tensorflow(path: Path, hidden_tensorflow: dict[str, str],
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    printed = run_lecture(path, hidden_tensorflow, monkeypatch, "TensorFlow")
    assert "Traceback" not in printed, f"{path.name} prints a traceback without TensorFlow"
    if uses_tensorflow(nbformat.read(path, as_version=4)):
        said = printed.lower()
        assert "tensorflow" in said and ("is missing here" in said or "not installed" in said), (
            f"{path.name} uses TensorFlow but never says what it skipped without it "
            "(a cell starting with `%%needs tensorflow` prints that sentence)")
