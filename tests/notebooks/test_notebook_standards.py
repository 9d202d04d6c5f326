"""Static checks of the course notebooks: the "Standards for every notebook" of the lectures issue;
and what readers see (the notebooks, the website's pages, the benchmark reports) names none of the
project's machinery: no issue number, no lent machine, no test file (but in the developers' guide).

These read committed files only (no kernel runs; nbval does that in `make
test-notebooks`). nbval compares outputs only for cells that were executed and only where a cell is
tagged `nbval-check-output`, so a notebook committed unexecuted, or with too few checked cells,
would pass nbval while checking nothing: these tests close that gap. Others keep the harness out of
the students' sight (tags, not `# NBVAL_...` comments; no printed `True` for a check) and keep the
notebooks alike (one title style).

One test item per (notebook, standard), so a failure names both. To check another folder, add it to
FOLDERS with the standards that apply there.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[2]

CHECK_TAG = "nbval-check-output"
IGNORE_TAG = "nbval-ignore-output"
HARNESS_COMMENT = re.compile(r"^\s*#\s*NBVAL_\w*", re.MULTILINE)
# "01_x.ipynb" -> "1", "12_x.ipynb" -> "12": the number a notebook's title carries.
NUMBER = re.compile(r"^0*(\d+)_")
# A printed check: a line ending in True/False after a comparison ("losses agree: True"), two or
# more booleans in a row (a table of checks), or a boolean alone. A fact ("CUDA available: False")
# passes: it has no comparison before its boolean.
COMPARISON = (r"==|\s=\s|≈|<|>|\b(?:equal|equals|agree|agrees|same|match|matches|pass|passes|"
              r"passed|fail|fails|identical|below|above|fell|moved|removed|freed|arrive)\b")
PRINTED_CHECK = re.compile(rf"(?:{COMPARISON}).*\b(?:True|False)\s*$"
                           r"|(?:\b(?:True|False)\s+){1,}(?:True|False)\s*$|^\s*(?:True|False)\s*$")
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
# A printed duration or rate: "0.52 s", "12 ms", "3.1 µs", "1.5e+03 ns", "2 seconds", "7.3 it/s".
TIMING = re.compile(
    r"\d\s*(?:ns|us|µs|μs|ms|s|sec|secs|seconds?|min|minutes?)\b(?!/)|it/s|s/it", re.IGNORECASE
)
TF_IMPORT = re.compile(r"^\s*(?:import|from)\s+(?:tensorflow|keras)\b", re.MULTILINE)
# TensorFlow used at a cell's top level: `tf.`, `tf1.` or `keras.` on an unindented line, outside
# a string ("tf.data") and a comment. Indented uses sit in `if tensorflow_here:` blocks.
TF_TOP_LEVEL_USE = re.compile(r"^[^#\s][^#\n]*(?<![\"'\w.])(?:tf|tf1|keras)\.", re.MULTILINE)
# setup() calls quiet_tensorflow(); exercise notebooks call it alone.
SETUP_CALL = re.compile(r"^[^#\n]*\b(?:setup|quiet_tensorflow)\(", re.MULTILINE)
EXPECTED_TIME = re.compile(r"\btime\b[^\n]*?\d+\s*(?:min|minutes?|h|hours?)\b", re.IGNORECASE)

Notebook = nbformat.NotebookNode
Check = Callable[[Path, Notebook], list[str]]


def checked(cell: Notebook) -> bool:
    return CHECK_TAG in cell.metadata.get("tags", [])


def code_cells(nb: Notebook) -> list[Notebook]:
    return [c for c in nb.cells if c.cell_type == "code"]


def markdown_cells(nb: Notebook) -> list[Notebook]:
    return [c for c in nb.cells if c.cell_type == "markdown"]


def output_text(output: Notebook) -> str:
    """All the text an output shows: stream text, text/* data, and an error's traceback."""
    if output.get("output_type") == "stream":
        text = output.get("text", "")
        return text if isinstance(text, str) else "".join(text)
    if output.get("output_type") == "error":
        return "\n".join([output.get("ename", ""), output.get("evalue", ""),
                          *output.get("traceback", [])])
    parts = []
    for mime, value in output.get("data", {}).items():
        if mime.startswith("text/") or mime == "application/vnd.jupyter.stderr":
            parts.append(value if isinstance(value, str) else "".join(value))
    return "\n".join(parts)


def label(nb: Notebook, cell: Notebook) -> str:
    """'code cell 7 (In [7])': the index nbval reports (counting code cells from 0)."""
    index = code_cells(nb).index(cell)
    return f"code cell {index} (In [{cell.get('execution_count')}])"


# ---------------------------------------------------------------------------------------------
# The standards. Each returns a list of problems; an empty list passes.


def valid_nbformat(path: Path, nb: Notebook) -> list[str]:
    try:
        nbformat.validate(nb)
    except nbformat.ValidationError as err:
        return [f"not a valid nbformat {nb.nbformat} notebook: {err.message}"]
    return []


def executed_in_order(path: Path, nb: Notebook) -> list[str]:
    """Unexecuted cells are never compared by nbval; every count 1..n, top to bottom, in one run."""
    counts = [c.get("execution_count") for c in code_cells(nb)]
    if counts == list(range(1, len(counts) + 1)):
        return []
    return [f"execution counts are {counts}, expected 1..{len(counts)} in order: execute the "
            "notebook top to bottom in a fresh kernel (make notebooks NB=...)"]


def no_error_outputs(path: Path, nb: Notebook) -> list[str]:
    return [f"{label(nb, c)} has an error output: {o.get('ename')}: {o.get('evalue')}"
            for c in code_cells(nb) for o in c.get("outputs", []) if o.output_type == "error"]


def no_tracebacks(path: Path, nb: Notebook) -> list[str]:
    return [f"{label(nb, c)} prints a traceback"
            for c in code_cells(nb)
            if any("Traceback" in output_text(o) for o in c.get("outputs", []))]


def a_third_checked(path: Path, nb: Notebook) -> list[str]:
    cells = code_cells(nb)
    count = sum(checked(c) for c in cells)
    if 3 * count >= len(cells):
        return []
    return [f"only {count} of {len(cells)} code cells are tagged {CHECK_TAG!r}; "
            f"at least {-(-len(cells) // 3)} must be"]


def no_disabled_eager(path: Path, nb: Notebook) -> list[str]:
    """TF 1.x code runs inside `with tf.Graph().as_default():`, never in a kernel without eager."""
    return [f"{label(nb, c)} mentions disable_eager_execution: use tf.Graph().as_default() "
            "and tf.compat.v1.Session instead"
            for c in code_cells(nb) if "disable_eager_execution" in c.source]


def setup_before_tensorflow(path: Path, nb: Notebook) -> list[str]:
    """setup() (or quiet_tensorflow()) sets TF_CPP_MIN_LOG_LEVEL / TF_ENABLE_ONEDNN_OPTS: it must
    run before TF loads."""
    source = "\n".join(c.source for c in code_cells(nb))
    tf_import = TF_IMPORT.search(source)
    if tf_import is None:
        return []
    setup_call = SETUP_CALL.search(source)
    if setup_call is None or setup_call.start() > tf_import.start():
        return [f"{tf_import.group().strip()!r} runs before `rng = setup()` (or "
                "quiet_tensorflow(), from edu_dl.notebook.lecture): TensorFlow's log lines would "
                "pollute "
                "the outputs"]
    return []


def tensorflow_cells_start_with_needs(path: Path, nb: Notebook) -> list[str]:
    """Without TensorFlow (`make install` without it, or a hosted notebook) a TensorFlow cell must
    say so in one sentence and be skipped, not fail: `%%needs tensorflow` as its first line."""
    return [f"{label(nb, c)} uses TensorFlow but does not start with `%%needs tensorflow`"
            for c in code_cells(nb)
            if (TF_IMPORT.search(c.source) or TF_TOP_LEVEL_USE.search(c.source))
            and not c.source.startswith("%%needs ")]


ON_GPU_CALL = re.compile(r"(?<!\w)on_gpu\(")


def gpu_cells_start_with_needs_gpu(path: Path, nb: Notebook) -> list[str]:
    """A lecture's GPU section is a cell that starts with `%%needs gpu` (plus the GPU libraries
    it uses): its code as a student would write it, skipped in one sentence without a GPU; not
    the code wrapped in a function handed to `on_gpu` with a description string."""
    return [f"{label(nb, c)} calls on_gpu(...): start the cell with `%%needs gpu` instead"
            for c in code_cells(nb) if ON_GPU_CALL.search(c.source)]


def timing_cells_not_checked(path: Path, nb: Notebook) -> list[str]:
    """Durations and rates differ on every run: such a cell must not be checked."""
    problems = []
    for c in code_cells(nb):
        if not checked(c):
            continue
        for o in c.get("outputs", []):
            match = TIMING.search(output_text(o))
            if match:
                problems.append(f"{label(nb, c)} is tagged {CHECK_TAG} but prints a timing or a "
                                f"rate ({match.group()!r}): tag it {IGNORE_TAG} instead")
                break
    return problems


def opens_with_objectives(path: Path, nb: Notebook) -> list[str]:
    md = markdown_cells(nb)
    if not md:
        return ["no markdown cell"]
    first = md[0].source
    problems = [f"the first markdown cell does not name its {word}"
                for word in ("objectives", "prerequisites") if word not in first.lower()]
    if not EXPECTED_TIME.search(first):
        problems.append("the first markdown cell gives no expected time (e.g. "
                        "'**Expected time.** 30 minutes')")
    return problems


def ends_with_exercise(path: Path, nb: Notebook) -> list[str]:
    md = markdown_cells(nb)
    exercise = f"exercises/{path.name}"
    if md and exercise in md[-1].source:
        return []
    return [f"the last markdown cell does not point to its exercise {exercise!r}"]


def ends_with_validate(path: Path, nb: Notebook) -> list[str]:
    """Every exercise ends with the step that grades it before it is handed in."""
    md = markdown_cells(nb)
    step = f"edu-dl validate {path.name}"
    if md and step in " ".join(md[-1].source.split()):
        return []
    return [f"the last markdown cell does not end with its validate step `{step}`"]


@functools.cache
def jupyterlab_kernelspec() -> dict[str, str]:
    """The kernelspec JupyterLab writes into a notebook it opens with this environment's kernel
    (ipykernel's own: its display name is "Python 3 (ipykernel)")."""
    from ipykernel.kernelspec import KERNEL_NAME, get_kernel_dict

    spec = get_kernel_dict()
    return {"display_name": spec["display_name"], "language": spec["language"],
            "name": KERNEL_NAME}


def kernelspec_as_jupyterlab_writes_it(path: Path, nb: Notebook) -> list[str]:
    """Any other kernelspec is rewritten when JupyterLab opens the notebook: it then shows as
    modified, and once saved, `git status` is dirty before the student changed anything."""
    want, got = jupyterlab_kernelspec(), dict(nb.metadata.get("kernelspec", {}))
    if got == want:
        return []
    return [f"its kernelspec {got} is not the one JupyterLab writes, {want}: opening it in "
            "JupyterLab would mark it modified"]


def no_run_metadata(path: Path, nb: Notebook) -> list[str]:
    """Per-cell timestamps and widget state change on every run: noise in every diff."""
    problems = [f"{label(nb, c)} keeps execution timestamps in its metadata"
                for c in code_cells(nb) if "execution" in c.metadata]
    if "widgets" in nb.metadata:
        problems.append("the notebook metadata keeps widget state")
    if problems:
        problems.append("execute notebooks with `make notebooks NB=...`, which records neither")
    return problems


def no_harness_comments(path: Path, nb: Notebook) -> list[str]:
    """nbval's markers are cell tags, out of the students' sight, never comments in the code."""
    problems = []
    for c in code_cells(nb):
        match = HARNESS_COMMENT.search(c.source)
        if match:
            tag = match.group().strip("# ").lower().replace("_", "-")
            problems.append(f"{label(nb, c)} has the comment {match.group().strip()!r}: "
                            f"use the cell tag {tag!r}")
    return problems


def title_style(path: Path, nb: Notebook) -> list[str]:
    """One title style: '# 6. Feeding the GPU' for a lecture, '# Exercise 6. ...' for the rest."""
    md = markdown_cells(nb)
    number = NUMBER.match(path.name)
    if not md or number is None:
        return [f"{path.name}: no markdown cell, or no number in the file name"]
    prefix = "# " if path.parent.name == "lectures" else "# Exercise "
    want = f"{prefix}{number.group(1)}. "
    first = md[0].source.partition("\n")[0]
    return [] if first.startswith(want) else [f"the title {first!r} does not start with {want!r}"]


def no_widget_outputs(path: Path, nb: Notebook) -> list[str]:
    """A committed progress widget shows frozen ("0/500"): progress bars are text or nothing."""
    return [f"{label(nb, c)} keeps a widget output (a frozen progress bar?): execute with "
            "`make notebooks NB=...`, which sets TQDM_DISABLE=1"
            for c in code_cells(nb)
            if any(WIDGET_VIEW in o.get("data", {}) for o in c.get("outputs", []))]


def no_printed_checks(path: Path, nb: Notebook) -> list[str]:
    """'FLOPs = 2n³: True' teaches nothing: show the values (after asking for a prediction)."""
    problems = []
    for c in code_cells(nb):
        for o in c.get("outputs", []):
            line = next((ln for ln in output_text(o).splitlines() if PRINTED_CHECK.search(ln)),
                        None)
            if line is not None:
                problems.append(f"{label(nb, c)} prints a check's bare boolean: {line.strip()!r}")
                break
    return problems


COMMON: list[Check] = [valid_nbformat, executed_in_order, no_error_outputs, no_tracebacks,
                       a_third_checked, no_disabled_eager, setup_before_tensorflow,
                       timing_cells_not_checked, no_run_metadata, no_harness_comments,
                       title_style, no_widget_outputs, no_printed_checks,
                       kernelspec_as_jupyterlab_writes_it]
LECTURE: list[Check] = [*COMMON, opens_with_objectives, ends_with_exercise,
                        tensorflow_cells_start_with_needs, gpu_cells_start_with_needs_gpu]

# folder -> the standards its notebooks must meet.
FOLDERS: dict[str, list[Check]] = {
    "lectures": LECTURE,
    # Solutions are graded by their check() cells, not by a share of checked outputs.
    "solutions": [valid_nbformat, executed_in_order, no_error_outputs, no_tracebacks,
                  no_disabled_eager, setup_before_tensorflow, no_run_metadata,
                  no_harness_comments, title_style, no_widget_outputs, no_printed_checks,
                  kernelspec_as_jupyterlab_writes_it, ends_with_validate],
    # Generated from the solutions and committed unexecuted: what a student opens.
    "exercises": [valid_nbformat, no_harness_comments, title_style,
                  kernelspec_as_jupyterlab_writes_it, ends_with_validate],
}


def notebooks() -> list[Path]:
    return sorted(p for folder in FOLDERS for p in (ROOT / folder).glob("*.ipynb"))


CASES = [pytest.param(path, check, id=f"{path.parent.name}/{path.stem}-{check.__name__}")
         for path in notebooks() for check in FOLDERS[path.parent.name]]


@pytest.mark.parametrize(("path", "check"), CASES)
def test_notebook_standard(path: Path, check: Check) -> None:
    nb = nbformat.read(path, as_version=4)
    problems = check(path, nb)
    assert not problems, f"{path.relative_to(ROOT)}: " + "; ".join(problems)


# ---------------------------------------------------------------------------------------------
# The checks themselves catch what they should: a tiny notebook, broken one way at a time.


def make_notebook() -> Notebook:
    v4 = nbformat.v4
    cells = [
        v4.new_markdown_cell("# 99. Demo\n\n**Learning objectives.** x\n\n**Prerequisites.** y\n\n"
                             "**Expected time.** 20 minutes."),
        v4.new_code_cell("from edu_dl.notebook.lecture import setup\nrng = setup()"),
        v4.new_code_cell("print(1 + 1)", metadata={"tags": [CHECK_TAG]}),
        v4.new_code_cell("print('took 0.3 s')", metadata={"tags": [IGNORE_TAG]}),
        v4.new_code_cell("%%needs tensorflow\nimport tensorflow as tf\nprint(tf.__version__)",
                         metadata={"tags": [CHECK_TAG]}),
        v4.new_markdown_cell("Practise in `exercises/99_demo.ipynb`."),
    ]
    cells[1].outputs = []
    cells[2].outputs = [v4.new_output("stream", name="stdout", text="2\n")]
    cells[3].outputs = [v4.new_output("stream", name="stdout", text="took 0.3 s\n")]
    cells[4].outputs = []
    nb = v4.new_notebook(cells=cells)
    nb.metadata["kernelspec"] = dict(jupyterlab_kernelspec())
    for n, cell in enumerate(code_cells(nb), start=1):
        cell.execution_count = n
    return nb


DEMO = Path("lectures/99_demo.ipynb")


def test_the_demo_notebook_meets_every_standard() -> None:
    nb = make_notebook()
    assert {c.__name__: c(DEMO, nb) for c in LECTURE} == {c.__name__: [] for c in LECTURE}


def test_checks_catch_an_unexecuted_cell() -> None:
    nb = make_notebook()
    code_cells(nb)[1].execution_count = None
    assert executed_in_order(DEMO, nb)


def test_checks_catch_cells_run_out_of_order() -> None:
    nb = make_notebook()
    code_cells(nb)[0].execution_count, code_cells(nb)[1].execution_count = 2, 1
    assert executed_in_order(DEMO, nb)


def test_checks_catch_errors_and_tracebacks() -> None:
    nb = make_notebook()
    code_cells(nb)[1].outputs.append(nbformat.v4.new_output(
        "error", ename="ValueError", evalue="bad", traceback=["Traceback (most recent call last)"]))
    assert no_error_outputs(DEMO, nb)
    assert no_tracebacks(DEMO, nb)
    nb = make_notebook()
    code_cells(nb)[1].outputs.append(nbformat.v4.new_output(
        "stream", name="stderr", text="Traceback (most recent call last):\n  ...\n"))
    assert no_tracebacks(DEMO, nb)
    assert not no_error_outputs(DEMO, nb)


def test_checks_catch_too_few_checked_cells() -> None:
    nb = make_notebook()
    nb.cells.insert(2, nbformat.v4.new_code_cell("x = 1", execution_count=None))
    nb.cells.insert(2, nbformat.v4.new_code_cell("y = 1", execution_count=None))
    nb.cells.insert(2, nbformat.v4.new_code_cell("z = 1", execution_count=None))
    assert a_third_checked(DEMO, nb)  # 2 of 7


def test_checks_catch_disabled_eager_execution() -> None:
    nb = make_notebook()
    code_cells(nb)[1].source += "\ntf.compat.v1.disable_eager_execution()"
    assert no_disabled_eager(DEMO, nb)


def test_checks_catch_tensorflow_before_setup() -> None:
    nb = make_notebook()
    code_cells(nb)[0].source = (
        "import tensorflow as tf\nfrom edu_dl.notebook.lecture import setup\nsetup()")
    assert setup_before_tensorflow(DEMO, nb)
    code_cells(nb)[0].source = "from keras import layers"
    assert setup_before_tensorflow(DEMO, nb)
    code_cells(nb)[0].source = "# setup()\nimport keras"
    assert setup_before_tensorflow(DEMO, nb)


@pytest.mark.parametrize("text", ["took 0.3 s\n", "12.5 ms per step\n", "3 µs\n", "1e+03 ns",
                                  "100%|####| 50/50 [00:01<00:00, 41.2it/s]", "2 seconds"])
def test_checks_catch_a_checked_timing_cell(text: str) -> None:
    nb = make_notebook()
    cell = code_cells(nb)[1]
    cell.outputs = [nbformat.v4.new_output("stream", name="stderr", text=text)]
    assert timing_cells_not_checked(DEMO, nb)
    cell.metadata["tags"] = [IGNORE_TAG]
    assert not timing_cells_not_checked(DEMO, nb)


@pytest.mark.parametrize("text", ["loss at step 10: 2.5\n", "shapes (64, 10) float32\n",
                                  "10 steps, 3 layers\n", "bandwidth 480 GB/s\n", "True\n"])
def test_timing_check_leaves_other_outputs_alone(text: str) -> None:
    nb = make_notebook()
    code_cells(nb)[1].outputs = [nbformat.v4.new_output("stream", name="stdout", text=text)]
    assert not timing_cells_not_checked(DEMO, nb)


def test_checks_catch_a_missing_opening_or_closing() -> None:
    nb = make_notebook()
    nb.cells[0].source = "# 9. Demo\n\n**Learning objectives.** x"
    assert len(opens_with_objectives(DEMO, nb)) == 2  # no prerequisites, no expected time
    nb.cells[-1].source = "That's all."
    assert ends_with_exercise(DEMO, nb)
    nb.cells[-1].source = "Practise in `exercises/98_other.ipynb`."
    assert ends_with_exercise(DEMO, nb)


def test_checks_catch_run_timestamps_and_widget_state() -> None:
    nb = make_notebook()
    code_cells(nb)[1].metadata["execution"] = {"iopub.status.idle": "2026-11-22T00:37:46Z"}
    problems = no_run_metadata(DEMO, nb)
    assert problems and "code cell 1" in problems[0]
    nb = make_notebook()
    nb.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": {}}
    assert no_run_metadata(DEMO, nb)


@pytest.mark.parametrize("source", [
    "import tensorflow as tf\nprint(tf.__version__)",
    "from keras import layers",
    "x = tf.constant(1.0)  # tf imported by an earlier cell",
    "import numpy as np\n%%needs tensorflow\nimport tensorflow",  # not the first line: an error
])
def test_checks_catch_a_tensorflow_cell_without_needs(source: str) -> None:
    nb = make_notebook()
    code_cells(nb)[3].source = source
    problems = tensorflow_cells_start_with_needs(DEMO, nb)
    assert problems and "code cell 3" in problems[0]


@pytest.mark.parametrize("source", [
    'if tensorflow_here:\n    print(tf.__version__)',  # guarded: runs only with TensorFlow
    'rows = [r for r in rows if r.framework == "tf.data"]',
    "# tf.function traces once\nprint(1)",
])
def test_plain_cells_that_only_name_tensorflow_pass(source: str) -> None:
    nb = make_notebook()
    code_cells(nb)[3].source = source
    assert tensorflow_cells_start_with_needs(DEMO, nb) == []


@pytest.mark.parametrize(("source", "flagged"), [
    ('on_gpu(run_it, "timing your GPU", needs=("torch",))', True),
    ("result = lecture.on_gpu(lambda: 1)", True),
    ("%%needs gpu torch\nprint(torch.cuda.get_device_name())", False),
    ("def standardize_on_gpu():\n    pass\n\n\nstandardize_on_gpu()", False),
])
def test_checks_catch_a_gpu_section_handed_to_on_gpu(source: str, flagged: bool) -> None:
    nb = make_notebook()
    code_cells(nb)[3].source = source
    problems = gpu_cells_start_with_needs_gpu(DEMO, nb)
    assert bool(problems) == flagged and (not flagged or "code cell 3" in problems[0])


def test_quiet_tensorflow_counts_as_set_up() -> None:
    nb = make_notebook()
    code_cells(nb)[0].source = (
        "from edu_dl.notebook.lecture import quiet_tensorflow\nquiet_tensorflow()\n"
        "import tensorflow")
    assert setup_before_tensorflow(DEMO, nb) == []


def test_checks_catch_an_nbval_comment() -> None:
    nb = make_notebook()
    code_cells(nb)[1].source = "# NBVAL_CHECK_OUTPUT\nprint(1 + 1)"
    problems = no_harness_comments(DEMO, nb)
    assert problems and "'nbval-check-output'" in problems[0]


@pytest.mark.parametrize(("name", "title", "ok"), [
    ("lectures/06_x.ipynb", "# 6. Feeding the GPU", True),
    ("lectures/03_x.ipynb", "# 3. Writing a GPU kernel", True),
    ("lectures/11_x.ipynb", "# 11. Convolutions", True),
    ("lectures/06_x.ipynb", "# 06 · Feeding the GPU", False),
    ("lectures/12_x.ipynb", "# Lecture 12 — Static vs dynamic", False),
    ("lectures/06_x.ipynb", "# 4. Wrong number", False),
    ("solutions/06_x.ipynb", "# Exercise 6. Feeding the GPU", True),
    ("solutions/06_x.ipynb", "# 6. Feeding the GPU", False),
])
def test_checks_catch_another_title_style(name: str, title: str, ok: bool) -> None:
    nb = make_notebook()
    nb.cells[0].source = title + "\n\nmore"
    assert (title_style(Path(name), nb) == []) is ok


def test_checks_catch_a_frozen_widget() -> None:
    nb = make_notebook()
    code_cells(nb)[2].outputs.append(nbformat.v4.new_output(
        "display_data", data={WIDGET_VIEW: {"model_id": "abc"}, "text/plain": "0/500"}))
    assert no_widget_outputs(DEMO, nb)


@pytest.mark.parametrize("text", ["FLOPs = 2n³:  True", "losses agree: True", "True",
                                  "edu_dl eager   True    True    True", "passed: False",
                                  "a == b: False | c == d: True", "below 1e-5: True"])
def test_checks_catch_a_printed_check(text: str) -> None:
    nb = make_notebook()
    code_cells(nb)[1].outputs = [nbformat.v4.new_output("stream", name="stdout", text=text)]
    assert no_printed_checks(DEMO, nb)


@pytest.mark.parametrize("text", ["torch.cuda.is_available(): False", "CUDA available: True",
                                  "max rel. error 2e-16", "loss 0.25 (PyTorch 0.25)"])
def test_printed_facts_are_not_checks(text: str) -> None:
    nb = make_notebook()
    code_cells(nb)[1].outputs = [nbformat.v4.new_output("stream", name="stdout", text=text)]
    assert not no_printed_checks(DEMO, nb)


def test_checks_catch_a_kernelspec_jupyterlab_would_rewrite() -> None:
    nb = make_notebook()
    nb.metadata["kernelspec"]["display_name"] = "Python 3"  # what the notebooks used to say
    assert kernelspec_as_jupyterlab_writes_it(DEMO, nb)
    del nb.metadata["kernelspec"]
    assert kernelspec_as_jupyterlab_writes_it(DEMO, nb)


def test_checks_catch_an_exercise_without_its_validate_step() -> None:
    exercise = Path("exercises/99_demo.ipynb")
    nb = make_notebook()
    nb.cells[-1].source = "Run `!edu-dl validate 99_demo.ipynb`\nbefore you submit."
    assert ends_with_validate(exercise, nb) == []
    nb.cells[-1].source = "Run `!edu-dl validate 98_other.ipynb` before you submit."
    assert ends_with_validate(exercise, nb)
    nb.cells.append(nbformat.v4.new_markdown_cell("Going further: ..."))
    nb.cells[-2].source = "Run `!edu-dl validate 99_demo.ipynb` before you submit."
    assert ends_with_validate(exercise, nb)


# ---------------------------------------------------------------------------------------------
# What readers see names none of the project's own machinery: the lectures, exercises and
# solutions (sources and the outputs they show), the website's pages (the README, whose students'
# part is the site's students page, and site/*.md) and every committed benchmark report say what
# was measured where (the device, the date, the command) and what was checked, never an issue of
# the tracker ("issue 12", "issues 2 and 13", "#29") nor "a lent machine / lent GPU". Pages for
# students and instructors, and the reports, name no test file either (a development benchmark
# under tests/, such as tests/bench_cluster.py, is a command and may be named); the developers'
# guide (site/developers.md) may.

TRACKER = re.compile(
    r"\bissues?\s+(?:no\.?\s*)?#?\d+"  # issue 12, issues 2 and 13, Issue #29
    r"|(?:\(|\b(?:issues?|PRs?|pull\s+requests?|fix(?:es|ed)?|close[sd]?|see|tracker|ticket)\s+)"
    r"#\d+\b"  # (#2), fixes #7, see #3
    r"|(?<![\w&#/:='\"])#\d{2,}\b",  # #29; not #1 (a count: "backward #1"), color:#333, "#555"
    re.IGNORECASE)
LENT = re.compile(
    r"\blent\s+(?:\w+\s+){0,2}?(?:machines?|gpus?|devices?|h[12]00)\b"  # a lent GPU, another
    r"|\b(?:machines?|gpus?|devices?|h[12]00)\s+(?:(?:was|were|is|are)\s+)?lent\b",  # GPU was lent
    re.IGNORECASE)
TEST_PATH = re.compile(r"\btests/(?!bench_\w+\.py\b|README\.md\b)[\w./-]+")
README_STUDENTS = ("<!-- students' part", "<!-- end of the students' part")
SHOWN_MIMES = ("text/plain", "text/markdown", "text/latex")  # not text/html: CSS has #333 colours


def reader_texts(path: Path) -> list[tuple[str, str]]:
    """(where, text) of what a reader of ``path`` sees: a notebook's cell sources and the outputs
    they show, or a text file's whole text ('' for a file that is not UTF-8 text, such as a PNG)."""
    if path.suffix != ".ipynb":
        try:
            return [("", path.read_text(encoding="utf-8"))]
        except UnicodeDecodeError:
            return []
    found = []
    for n, cell in enumerate(nbformat.read(path, as_version=4).cells):
        found.append((f"cell {n}", cell.source))
        for output in cell.get("outputs", []):
            if output.output_type == "stream":
                text = output.get("text", "")
                found.append((f"cell {n}'s output", "".join(text)))
            elif output.output_type == "error":
                found.append((f"cell {n}'s error", output_text(output)))
            for mime in SHOWN_MIMES:
                if mime in output.get("data", {}):
                    value = output.data[mime]
                    found.append((f"cell {n}'s output", "".join(value)))
    return found


def machinery(path: Path, texts: list[tuple[str, str]], test_paths: bool = True) -> list[str]:
    """Each issue number, lent machine and (with ``test_paths``) test file that ``texts`` name."""
    patterns = [("an issue number", TRACKER), ("a lent machine", LENT)]
    patterns += [("a test file", TEST_PATH)] if test_paths else []
    return [f"{where or path.name}: {what} {m[0]!r} in ...{text[max(0, m.start() - 50):m.end()]!r}"
            for where, text in texts for what, pattern in patterns
            for m in pattern.finditer(text)]


def readers_files() -> list[Path]:
    notebooks_ = sorted(p for folder in ("lectures", "exercises", "solutions")
                        for p in (ROOT / folder).glob("*.ipynb"))
    reports = sorted(p for p in (ROOT / "benchmarks").rglob("*")
                     if p.is_file() and "__pycache__" not in p.parts)
    return [*notebooks_, ROOT / "README.md", *sorted((ROOT / "site").glob("*.md")), *reports]


def readers_see(path: Path) -> list[str]:
    texts = reader_texts(path)
    if path == ROOT / "README.md":  # all of it is read; its students' part is the students' page
        text = texts[0][1]
        start, end = (text.find(marker) for marker in README_STUDENTS)
        students = [("the students' part", text[start:end])] if 0 <= start < end else []
        return machinery(path, texts, test_paths=False) + machinery(path, students)
    return machinery(path, texts, test_paths=path != ROOT / "site" / "developers.md")


@pytest.mark.parametrize("path", readers_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_readers_see_no_issue_number_lent_machine_or_test_file(path: Path) -> None:
    problems = readers_see(path)
    assert not problems, (f"{path.relative_to(ROOT)} names the project's machinery: say what was "
                          "measured where (device, date, command) and what was checked; "
                          + "; ".join(problems))


@pytest.mark.parametrize("text", [
    "Targets (issue 29)", "### Targets (issues 2 and 12)", "as issue #13 asked", "fixed (#7)",
    "see #3", "the plan of #29", "Issue 15: within 1.5x", "on a lent machine", "On a lent GPU,",
    "a GPU lent to the session", "no GPU was lent to this work", "the lent H200",
    "`tests/engine/test_attention.py` checks it", "solutions in `tests/fixtures/speed/`"])
def test_the_machinery_check_catches(text: str, tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(text, encoding="utf-8")
    assert readers_see(page), text


@pytest.mark.parametrize("text", [
    "after backward #1: x.grad = [2. 4.]", "issues of numerical stability", "# 1. Tensors",
    "style='color:#333'", 'color="#555555"', "&#39;", "the lens of a camera", "an excellent GPU",
    "`tests/bench_cluster.py --workers 2`", "the test targets: tests/README.md"])
def test_the_machinery_check_leaves_other_text_alone(text: str, tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(text, encoding="utf-8")
    assert readers_see(page) == [], text
