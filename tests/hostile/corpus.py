"""A tiny two-part source exercise and a corpus of hostile and broken submissions of it.

Generated, not stored: each case is the solved student notebook with one edit, so the corpus
follows the exercise when it changes. ``EXPECTED`` says what the gradebook must record.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path

import nbformat

from edu_dl.grading import sandbox
from edu_dl.grading.nbgrader import clear_solutions, remove_hidden_tests

EXERCISE = "02_mini"
COURSE_PARTS = Path(__file__).resolve().parents[2] / "solutions" / "parts"


def write_source(folder: Path, nb: nbformat.NotebookNode, name: str = EXERCISE) -> Path:
    """A source notebook, with the course's part files beside it (parts/exNN.private.py) as the
    grader finds them beside solutions/: every exercise the notebook checks, and 6 for 7."""
    (folder / "parts").mkdir(parents=True, exist_ok=True)
    checked = {m.group(1) for cell in nb.cells if cell.cell_type == "code"
               for m in re.finditer(r"""check\(\s*["'](ex\w+)\.""", cell.source)}
    for exercise in checked | ({"ex06"} if "ex07" in checked else set()):
        for path in COURSE_PARTS.glob(f"{exercise}.*py"):  # the public and private halves
            shutil.copy(path, folder / "parts" / path.name)
    return write(folder, nb, name)


def write(folder: Path, nb: nbformat.NotebookNode, name: str = EXERCISE) -> Path:
    """A student's notebook ``<folder>/<name>.ipynb`` (the folder made as needed)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.ipynb"
    nbformat.write(nb, path)
    return path


PARTS = ("ex02.gflops", "ex02.peak_bandwidth")


def _meta(gid: str, *, grade: bool = False, solution: bool = False, locked: bool = False,
          points: float | None = None) -> dict:
    meta = {"grade": grade, "grade_id": gid, "locked": locked, "schema_version": 3,
            "solution": solution, "task": False}
    if points is not None:
        meta["points"] = points
    return {"nbgrader": meta}


def _code(source: str, **meta) -> nbformat.NotebookNode:
    cell = nbformat.v4.new_code_cell(source)
    if meta:
        cell.metadata = _meta(**meta)
    return cell


GFLOPS = """def gflops(n, seconds):
    \"\"\"GFLOP/s of an n x n matmul that took `seconds`.\"\"\"
    ### BEGIN SOLUTION
    return 2.0 * n**3 / seconds / 1e9
    ### END SOLUTION"""
BANDWIDTH = """def peak_bandwidth(mega_transfers_per_s, bus_width_bytes, channels):
    ### BEGIN SOLUTION
    return mega_transfers_per_s * bus_width_bytes * channels
    ### END SOLUTION"""


def _test(part: str, fn: str) -> str:
    return (f'check("{part}", {fn})\n### BEGIN HIDDEN TESTS\ncheck("{part}", {fn}, hidden=True)\n'
            "### END HIDDEN TESTS")


def source() -> nbformat.NotebookNode:
    """The instructor's notebook: solutions and hidden tests."""
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_markdown_cell("# Mini exercise: FLOP rates and bandwidth"),
        _code("from edu_dl.grading import check", gid="setup", locked=True),
        _code(GFLOPS, gid="gflops", solution=True),
        _code(_test("ex02.gflops", "gflops"), gid="gflops_tests", grade=True, locked=True,
              points=1),
        _code(BANDWIDTH, gid="peak_bandwidth", solution=True),
        _code(_test("ex02.peak_bandwidth", "peak_bandwidth"), gid="peak_bandwidth_tests",
              grade=True, locked=True, points=1),
    ]
    return nb


def student(solved: bool = True) -> nbformat.NotebookNode:
    """The student's version: hidden tests removed; solutions cleared unless ``solved``."""
    nb = source()
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.source = remove_hidden_tests(cell.source, "corpus")[0]
            if not solved:
                cell.source = clear_solutions(cell.source, "corpus")[0]
    return nb


def _cell(nb: nbformat.NotebookNode, gid: str) -> nbformat.NotebookNode:
    return next(c for c in nb.cells if c.get("metadata", {}).get("nbgrader", {}).get(
        "grade_id") == gid)


def _prepend(gid: str, code: str) -> Callable[[nbformat.NotebookNode], None]:
    def edit(nb: nbformat.NotebookNode) -> None:
        _cell(nb, gid).source = code + "\n" + _cell(nb, gid).source
    return edit


def _replace(gid: str, old: str, new: str) -> Callable[[nbformat.NotebookNode], None]:
    def edit(nb: nbformat.NotebookNode) -> None:
        _cell(nb, gid).source = _cell(nb, gid).source.replace(old, new)
    return edit


def _drop_tests(nb: nbformat.NotebookNode) -> None:
    nb.cells = [c for c in nb.cells if not c.metadata.get("nbgrader", {}).get("grade")]


def _rename_and_fake_test(nb: nbformat.NotebookNode) -> None:
    cell = _cell(nb, "gflops_tests")
    cell.metadata["nbgrader"]["grade_id"] = "renamed"
    cell.source = 'print("✓ ex02.gflops: 2 cases passed")'
    _replace("gflops", "2.0 * n**3", "n**3")(nb)


WRONG = _replace("gflops", "2.0 * n**3", "n**3")  # half the rate: a typical mistake
GRADING_DIR = "__import__('os').environ['EDU_DL_GRADING_DIR']"

# name -> (edit of the solved notebook, or raw bytes; statuses for (gflops, peak_bandwidth))
CASES: dict[str, tuple[object, tuple[str, str]]] = {
    "good": (None, ("passed", "passed")),
    "wrong": (WRONG, ("failed", "passed")),
    # The cells after the one that timed out are skipped (--no-skip-after-timeout runs them).
    "infinite_loop": (_replace("gflops", "return 2.0", "while True: pass\n    return 2.0"),
                      ("timeout", "not run")),
    # The cell's error is named as the cause of the test's NameError (trust/errors.py).
    "syntax_error": (_replace("gflops", "return 2.0 * n**3", "return 2.0 * n**3 +"),
                     ("error", "passed")),
    "hostile_error_text": (_prepend("gflops", "raise type('E', (Exception,), {})("
                                    "'\\x1b[2J\\u202e' + 'x' * 10**6)"), ("error", "passed")),
    "sys_exit": (_prepend("gflops", "import sys; sys.exit(3)"), ("error", "passed")),
    "os_exit": (_prepend("gflops", "import os; os._exit(0)"), ("crashed", "crashed")),
    "segfault": (_prepend("gflops", "import ctypes; ctypes.string_at(0)"),
                 ("crashed", "crashed")),
    # These load the machine: where their cell times out, the cells after it are skipped
    # ("not run"), the test of gflops included.
    "memory_bomb": (_prepend("gflops", "import numpy as np\nhog = []\nwhile True:\n"
                             "    hog.append(np.ones(2**25))"),
                    ("error|not run", "passed|not run")),
    "fork_bomb": (_prepend("gflops", "import os\nwhile True:\n    os.fork()"),
                  ("processes|memory|not run", "processes|memory|not run")),
    # The flood is interrupted; the sandbox may hit its memory limit first (ZMQ's backlog).
    "print_gigabytes": (_prepend("gflops", "while True:\n    print('x' * 1_000_000)"),
                        ("error|memory|not run", "passed|memory|not run")),
    "huge_file": (_prepend("gflops", "with open('big.bin', 'wb') as f:\n"
                           "    f.write(b'0' * (300 * 2**20))"),
                  ("error|not run", "passed|not run")),
    "many_files": (_prepend("gflops", "for i in range(10**6):\n"
                            "    open(f'f{i}', 'w').write('x' * 4096)"),
                   ("error|not run", "passed|not run")),
    "deleted_tests": (_drop_tests, ("passed", "passed")),
    "renamed_test": (_rename_and_fake_test, ("failed", "passed")),
    "edited_test": (lambda nb: (WRONG(nb), _replace(
        "gflops_tests", 'check("ex02.gflops", gflops)', "print('✓ passed')")(nb)),
        ("failed", "passed")),
    "cheat_allclose": (lambda nb: (WRONG(nb), _prepend("gflops", (
        "import numpy as np\nnp.allclose = lambda *a, **k: True\n"
        "np.isclose = lambda a, b, *r, **k: np.ones(np.shape(a), bool)"))(nb)),
        ("failed", "passed")),
    "cheat_check": (lambda nb: (WRONG(nb), _prepend("gflops", (
        "import edu_dl.grading, edu_dl.grading.checking as c\n"
        "check = edu_dl.grading.check = c.check = lambda *a, **k: print('✓') or True"))(nb)),
        ("no result", "no result")),
    "cheat_transformer": (lambda nb: (WRONG(nb), _prepend("gflops", (
        "get_ipython().input_transformers_post.append(\n"
        "    lambda lines: ['print(\"✓ all passed\")\\n'])"))(nb)), ("no result", "no result")),
    "fake_outputs": (lambda nb: (WRONG(nb), _prepend("gflops", (
        f"import numpy as np, os\nd = os.path.join({GRADING_DIR}, 'outputs')\n"
        "os.makedirs(d, exist_ok=True)\n"
        "np.savez(os.path.join(d, 'ex02.gflops.999.npz'), hidden=np.array(True), "
        "n_cases=np.array(6), **{f'case{i}_out0': np.array(1.0) for i in range(6)}, "
        "**{f'case{i}_tuple': np.array(False) for i in range(6)}, "
        "**{f'case{i}_n_out': np.array(1) for i in range(6)})"))(nb)), ("failed", "passed")),
    # A write to a host path: refused (a read-only root), or, where the path lies under /tmp (a
    # CI clone), made in the sandbox's private /tmp and gone with it. Never on the host.
    "escape": (_prepend("gflops", "import pathlib\npathlib.Path('{escape}').write_text('x')"),
               ("error|passed", "passed")),
    # Markup for the feedback page: outputs a browser would run, a Markdown cell of script.
    "xss_outputs": (lambda nb: (_prepend("gflops", (
        "from IPython.display import publish_display_data\n"
        "publish_display_data({'text/html': '<script>window.__pwned = 1</script>',\n"
        "    'application/javascript': 'window.__pwned = 2',\n"
        "    'image/svg+xml': '<svg onload=\"window.__pwned = 3\"></svg>',\n"
        "    'text/plain': '<img src=x onerror=alert(1)>'})"))(nb),
        nb.cells.append(nbformat.v4.new_markdown_cell(
            "<script>window.__pwned = 4</script><img src=x onerror='window.__pwned = 5'>"
            "[x](javascript:alert(1))"))), ("passed", "passed")),
    "stub": ("stub", ("not implemented", "not implemented")),
    "corrupt": (b"\x89PNG this is not a notebook {", ("unreadable", "unreadable")),
    "other_exercise": ("other", ("wrong notebook", "wrong notebook")),
    "empty_folder": ("empty", ("missing", "missing")),
}


def build(root: Path, escape_target: Path, names: list[str] | None = None) -> dict[str, tuple]:
    """Write the source (root/source) and the corpus (root/submissions); returns the cases."""
    write_source(root / "source", source())
    chosen = {n: CASES[n] for n in (names or list(CASES))}
    for name, (edit, _) in chosen.items():
        folder = root / "submissions" / name
        folder.mkdir(parents=True)
        path = folder / f"{EXERCISE}.ipynb"
        if edit == "empty":
            continue
        if isinstance(edit, bytes):
            path.write_bytes(edit)
            continue
        nb = student(solved=edit != "stub")
        if edit == "other":
            nb = nbformat.v4.new_notebook(cells=[_code("print('exercise 7')", gid="ex7_setup",
                                                       locked=True)])
        elif callable(edit):
            edit(nb)
        text = nbformat.writes(nb).replace("{escape}", str(escape_target))
        path.write_text(text)
        json.loads(text)  # the corpus itself must be valid JSON
    return chosen


def sandbox_processes(group: str) -> list[int]:
    """Live (not zombie) processes of the sandboxes started with EDU_DL_SANDBOX_GROUP=group."""
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/environ", "rb") as f:
                tagged = f"{sandbox.TAG_VAR}={group}".encode() in f.read()
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                zombie = f.read().rsplit(b")", 1)[1].split()[0] == b"Z"
        except OSError:
            continue
        if tagged and not zombie:
            found.append(int(entry.name))
    return found
