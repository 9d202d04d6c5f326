"""check()'s feedback points at the real mistake (issue 25, item 6): a hint explains the output
the report names; generic hints for the shapes of mistakes; a failure caused by another of the
student's graded functions says so first (check() and the grader); inputs written in place
fail; a function that never returns is stopped; the report is laid out a line per case.

A small synthetic exercise ``hw9`` (``parts/hw9.py`` in a temporary folder) keeps these tests
independent of the course's exercises."""

from __future__ import annotations

import copy
import json
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from edu_dl.grading import check, checking, protocol
from edu_dl.grading.authoring import generic, guard, hints
from edu_dl.grading.authoring.spec import Part
from edu_dl.grading.model import Row
from edu_dl.grading.stages import judge

ROOT = Path(__file__).resolve().parents[2]

HW9 = '''
import numpy as np
from edu_dl.grading.authoring.hints import Mistake
from edu_dl.grading.authoring.spec import Part

def _cases(rng, hidden):
    return [(rng.standard_normal((3, 4)),), (rng.standard_normal((5, 2)),)]

def _pair_cases(rng, hidden):
    return [(rng.standard_normal((3, 4)), rng.uniform(1, 2, (3, 4)))]

def _mean_cases(rng, hidden):
    return [(float(rng.standard_normal()), rng.standard_normal((3, 4)))]

def _list_cases(rng, hidden):
    return [([3, 1, 2],)]

LONG = ("a hint that goes on for a while: " + "the values 1234567.89 and 0.000123456 " * 6
        + "end here")

PARTS = [
    Part(id="hw9.square", points=1, cases=_cases, expected=lambda x: x ** 2,
         arg_names=("x",)),
    Part(id="hw9.sum_of_squares", points=1, cases=_cases,
         expected=lambda x: (x ** 2).sum(axis=1), arg_names=("x",), uses=("hw9.square",)),
    Part(id="hw9.row_total", points=1, cases=_cases, expected=lambda x: (x ** 2).sum(axis=1),
         arg_names=("x",)),
    Part(id="hw9.pair", points=1, cases=_pair_cases, expected=lambda x, y: (x + y, x * y),
         arg_names=("x", "y"), output_names=("s", "p"),
         hints=(Mistake(lambda e, a: a[0] * a[1], "about p (matches a right p)", output=1),
                Mistake(lambda e, a: a[0] / a[1], "p is x * y, not x / y", output=1))),
    Part(id="hw9.mean_backward", points=1, cases=_mean_cases,
         expected=lambda d, x: d * np.ones_like(x) / x.size, arg_names=("dout", "x")),
    Part(id="hw9.scale_in_place", points=1, cases=_cases, expected=lambda x: 2 * x,
         arg_names=("x",), in_place=True),
    Part(id="hw9.sorted", points=1, cases=_list_cases, expected=lambda xs: np.sort(xs),
         arg_names=("xs",)),
    Part(id="hw9.long_hint", points=1, cases=_cases, expected=lambda x: x ** 2,
         arg_names=("x",), hints=(Mistake(lambda e, a: a[0] * 2, LONG),)),
]
'''

# A notebook's functions: module-level names, as a kernel's namespace holds them.
NOTEBOOK = '''
import numpy as np

def square(x):
    return x * 2  # wrong: doubles

def sum_of_squares(x):
    return square(x).sum(axis=1)

def row_total(x):
    return square(x).sum(axis=1)
'''


@pytest.fixture
def hw9(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working folder with ./parts/hw9.py, and a kernel that has checked nothing yet."""
    (tmp_path / "parts").mkdir()
    (tmp_path / "parts" / "hw9.py").write_text(HW9)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(checking, "_OUTCOMES", {}, raising=False)
    return tmp_path


def report_of(part_id: str, fn: Any, **kwargs: Any) -> str:
    """The report of a check() that must fail."""
    with pytest.raises(checking.CheckFailed) as info:
        check(part_id, fn, **kwargs)
    return info.value.report


def notebook(source: str = NOTEBOOK) -> dict[str, Any]:
    namespace: dict[str, Any] = {}
    exec(compile(source, "<notebook>", "exec"), namespace)
    return namespace


# ----------------------------------------------------------------------------- 1. hint and output


def test_a_hint_explains_the_output_the_report_names(hw9: Path) -> None:
    """A hint about p (output 1) that matches a right p is never given for a wrong s (output
    0); when s and p both fail and only p's mistake is recognised, the report names p."""
    s_wrong = checking.unwrapped(report_of("hw9.pair", lambda x, y: (x - y, x * y)))
    assert "output 0 (s)" in s_wrong and "about p" not in s_wrong
    both = checking.unwrapped(report_of("hw9.pair", lambda x, y: (x - y, x / y)))
    assert "output 1 (p)" in both and "hint: p is x * y, not x / y" in both
    assert "output 0 (s)" not in both
    only_p = checking.unwrapped(report_of("hw9.pair", lambda x, y: (x + y, x / y)))
    assert "output 1 (p)" in only_p and "hint: p is x * y, not x / y" in only_p


def test_first_hint_keeps_to_the_failed_output() -> None:
    about_1 = hints.Scaled("about output 1", output=1, factor=2.0)
    whole = hints.NonFinite("about the whole result")
    expected, got = (np.ones(2), np.ones(2)), (np.zeros(2), 2 * np.ones(2))
    assert hints.first_hint((about_1,), expected, got, ()) == "about output 1"
    assert hints.first_hint((about_1,), expected, got, (), output=0) is None
    assert hints.first_hint((about_1,), expected, got, (), output=1) == "about output 1"
    assert hints.first_hint((about_1, whole), expected, (np.full(2, np.nan), got[1]), (),
                            output=0) == "about the whole result"


# ----------------------------------------------------------------------------- 2. generic hints


def _x(rng: np.random.Generator, shape: tuple[int, ...] = (3, 4)) -> np.ndarray:
    return rng.standard_normal(shape)


def test_generic_hints_name_the_shape_of_the_mistake() -> None:
    rng = np.random.default_rng(0)
    x = _x(rng, (7, 4))
    e = x * 0.25
    hint = generic.generic_hint
    assert "exactly 3 times" in (hint(e, 3 * e, (x,), ("x",)) or "")
    assert "exactly 1/2 of" in (hint(e, e / 2, (x,), ("x",)) or "")
    said = hint(e, 7 * e, (x,), ("x",)) or ""  # a sum over the batch for its mean
    assert "exactly 7 times" in said and "x.shape[0]" in said
    said = hint(e, e / 28, (x,), ("x",)) or ""
    assert "1/28" in said and "x.size" in said
    assert "opposite sign" in (hint(e, -e, (x,), ("x",)) or "")
    assert "exactly 1 more" in (hint(e, e + 1, (x,), ("x",)) or "")
    assert "exactly 1 less" in (hint(np.arange(5), np.arange(5) - 1) or "")
    shifted = np.concatenate([e[:1], e[:-1]])  # row i holds row i - 1: an index one behind
    assert "one position later along axis 0" in (hint(e, shifted, (x,), ("x",)) or "")
    assert "one entry short along axis 0" in (hint(e, e[:-1], (x,), ("x",)) or "")
    assert "one entry too many along axis 1" in (hint(e[:, :3], e, (x,), ("x",)) or "")
    assert "transposed" in (hint(e, e.T, (x,), ("x",)) or "")
    cube = _x(rng, (2, 3, 4))
    assert "axes in the order (0, 2, 1)" in (hint(cube, cube.transpose(0, 2, 1)) or "")
    said = hint(x.sum(axis=1), x.sum(axis=0), (x,), ("x",)) or ""
    assert "sum of x over axis 0" in said and "over axis 1" in said
    assert "over every axis" in (hint(x.mean(axis=0), x.mean(), (x,), ("x",)) or "")
    assert "another order" in (hint(e, rng.permutation(e.ravel()).reshape(e.shape)) or "")
    assert "exactly 3 times" in (hint(np.array(4.0), np.array(12.0)) or "")  # a number too


@pytest.mark.parametrize("seed", range(5))
def test_generic_hints_are_quiet_on_right_answers_and_on_noise(seed: int) -> None:
    rng = np.random.default_rng(seed)
    for shape in [(), (1,), (2,), (5,), (3, 4), (4, 3), (2, 3, 4), (8, 1)]:
        x = _x(rng, shape if shape else (3,))
        e = rng.standard_normal(shape)
        assert generic.generic_hint(e, e.copy(), (x,), ("x",)) is None
        for _ in range(20):
            noise = rng.standard_normal(shape) * rng.choice([1e-3, 1.0, 1e3])
            assert generic.generic_hint(e, noise, (x,), ("x",)) is None
            other = rng.standard_normal(rng.integers(1, 5, size=len(shape) or 1))
            assert generic.generic_hint(e, other, (x,), ("x",)) is None or \
                "one entry" in str(generic.generic_hint(e, other, (x,), ("x",)))
        ints = rng.integers(-10**6, 10**6, size=shape)
        assert generic.generic_hint(ints, rng.integers(-10**6, 10**6, size=shape)) is None


def test_generic_hints_leave_non_numbers_alone() -> None:
    assert generic.generic_hint("abc", "cba") is None
    assert generic.generic_hint(np.array([1.0, np.nan]), np.array([2.0, np.nan])) is None
    assert generic.generic_hint(np.ones(3), np.array([object()] * 3)) is None


def test_check_gives_a_generic_hint_after_the_parts_own(hw9: Path) -> None:
    """mean_backward dividing by len(x), the first dimension, where x.size belongs: exactly
    x.shape[1] times too big, and the report says so."""
    report = checking.unwrapped(report_of(
        "hw9.mean_backward", lambda d, x: d * np.ones_like(x) / len(x)))
    assert "hint: every value is exactly 4 times the expected one (here 4 = x.shape[1])" \
        in report
    pair = checking.unwrapped(report_of("hw9.pair", lambda x, y: (x + y + 1, x * y)))
    assert "output 0 (s)" in pair and "hint: every value is exactly 1 more" in pair


# ----------------------------------------------------------------------------- 3. dependencies


def test_a_failure_caused_by_a_failing_function_it_uses_says_so_first(hw9: Path) -> None:
    ns = notebook()
    report_of("hw9.square", ns["square"])
    report = report_of("hw9.sum_of_squares", ns["sum_of_squares"])
    assert report.startswith("✗ hw9.sum_of_squares: your `square` fails its own check "
                             "(hw9.square); fix it first\n")
    assert "\n  ✗ case 1 of 2" in report  # then the usual report


def test_an_unchecked_dependency_is_checked_quietly(hw9: Path) -> None:
    """The student never ran square's check (or redefined square since): check() runs it."""
    ns = notebook()
    assert report_of("hw9.sum_of_squares", ns["sum_of_squares"]).startswith(
        "✗ hw9.sum_of_squares: your `square` fails its own check")
    assert "hw9.square" in checking._OUTCOMES


def test_a_function_that_names_a_failing_function_is_told_without_a_declaration(hw9: Path
                                                                                ) -> None:
    ns = notebook()
    report_of("hw9.square", ns["square"])
    assert report_of("hw9.row_total", ns["row_total"]).startswith(
        "✗ hw9.row_total: your `square` fails its own check (hw9.square); fix it first")


def test_no_blame_when_the_dependency_passes(hw9: Path) -> None:
    ns = notebook(NOTEBOOK.replace("x * 2  # wrong: doubles", "x ** 2") +
                  "\ndef broken(x):\n    return square(x).sum(axis=0)\n")
    assert check("hw9.square", ns["square"])
    report = report_of("hw9.sum_of_squares", ns["broken"])
    assert report.startswith("✗ hw9.sum_of_squares: 0 of 2 cases passed")
    assert "fails its own check" not in report


def test_the_grader_says_so_first_too() -> None:
    parts = {"hw9.square": Part(id="hw9.square", points=1, cases=lambda r, h: [],
                                expected=abs),
             "hw9.sum_of_squares": Part(id="hw9.sum_of_squares", points=1,
                                        cases=lambda r, h: [], expected=abs,
                                        uses=("hw9.square",))}

    def rows(square: str) -> list[Row]:
        return [Row("ann", "hw9", "hw9.square", 0, 1, square, "case 1 of 2 ..."),
                Row("ann", "hw9", "hw9.sum_of_squares", 0, 1, "failed", "0 of 2 cases passed")]

    failing = rows("failed")
    judge.blame_dependencies(failing, parts)
    assert failing[1].message == ("your `square` fails its own check (hw9.square); fix it "
                                  "first\n0 of 2 cases passed")
    assert failing[0].message == "case 1 of 2 ..."
    passing = rows("passed")
    judge.blame_dependencies(passing, parts)
    assert passing[1].message == "0 of 2 cases passed"


# ----------------------------------------------------------------------------- 4. in place


def test_writing_into_an_input_fails_naming_it(hw9: Path) -> None:
    def square(x: np.ndarray) -> np.ndarray:
        x **= 2
        return x

    report = checking.unwrapped(report_of("hw9.square", square))
    assert "✗ case 1 of 2 (x (3, 4)): your function wrote into its argument `x` (12 of 12 " \
           "entries)" in report


def test_a_sequence_argument_sorted_in_place_fails(hw9: Path) -> None:
    def sort_in_place(xs: Any) -> Any:
        xs.sort()
        return xs

    assert "wrote into its argument `xs` (3 of 3 entries)" in checking.unwrapped(
        report_of("hw9.sorted", sort_in_place))
    assert check("hw9.sorted", sorted)


def test_the_guard_looks_into_lists_and_dicts() -> None:
    before = ([1, 2, [np.zeros(2)]], {"k": np.ones(3)}, 5)
    assert guard.findings(before, copy.deepcopy(before)) == []
    after = copy.deepcopy(before)
    after[0][2][0][1] = 7.0
    after[1]["k"] = np.ones(4)
    assert guard.findings(before, after) == [protocol.Finding(protocol.WROTE, 0),
                                             protocol.Finding(protocol.WROTE, 1)]
    after = copy.deepcopy(before)
    after[0].append(3)
    assert guard.findings(before, after) == [protocol.Finding(protocol.WROTE, 0)]
    nan = (np.array([np.nan, 1.0]),)
    assert guard.findings(nan, copy.deepcopy(nan)) == []
    written = [protocol.Finding(protocol.WROTE, 0, 1)]
    assert guard.findings(nan, (np.array([np.nan, 2.0]),)) == written


def test_a_part_whose_contract_is_in_place_allows_it(hw9: Path) -> None:
    def scale(x: np.ndarray) -> np.ndarray:
        x *= 2
        return x

    assert check("hw9.scale_in_place", scale)


# ----------------------------------------------------------------------------- 5. time bound


@pytest.mark.timing
def test_a_function_that_never_returns_is_stopped_and_the_case_named(hw9: Path) -> None:
    def endless(x: np.ndarray) -> np.ndarray:
        while True:
            try:
                time.sleep(0.01)
            except Exception:  # a student's catch-all must not swallow the stop
                pass

    before = signal.getsignal(signal.SIGALRM)
    start = time.perf_counter()
    report = checking.unwrapped(report_of("hw9.square", endless, timeout_s=1))
    assert time.perf_counter() - start < 10
    assert "✗ case 1 of 2 (x (3, 4)) was still running when check()'s time bound of 1 s ran " \
           "out" in report
    assert signal.getsignal(signal.SIGALRM) is before
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)


def test_off_the_main_thread_check_runs_without_a_bound(hw9: Path) -> None:
    results: list[bool] = []
    worker = threading.Thread(target=lambda: results.append(bool(check(
        "hw9.square", lambda x: x ** 2, timeout_s=1))))
    worker.start()
    worker.join(60)
    assert results == [True]


# ----------------------------------------------------------------------------- 6. layout


def test_the_report_has_a_line_per_case_and_wraps_only_at_spaces(hw9: Path) -> None:
    report = report_of("hw9.long_hint", lambda x: x * 2)
    lines = report.splitlines()
    assert lines[0] == "✗ hw9.long_hint: 0 of 2 cases passed"
    assert lines[1] == "  ✗ case 1 of 2 (x (3, 4)): 12 of 12 entries differ"
    assert any(line.startswith("      [0, 0]: expected ") and " vs got " in line
               for line in lines)
    hint = [line for line in lines if line.startswith("      hint: ")]
    assert len(hint) == 1
    assert [line for line in lines if line.startswith("  ✗ case 2 of 2")]
    assert all(len(line) <= checking.WIDTH for line in lines)
    joined = checking.unwrapped(report)
    assert "1234567.89 and 0.000123456 the values" in joined  # every number whole
    assert len(joined.splitlines()) < len(lines)  # the hint was wrapped, and joins again


def test_passing_cases_get_a_tick_each_in_a_failing_report(hw9: Path) -> None:
    def square_small(x: np.ndarray) -> np.ndarray:
        return x ** 2 if x.shape == (3, 4) else x

    lines = report_of("hw9.square", square_small).splitlines()
    assert lines[0] == "✗ hw9.square: 1 of 2 cases passed"
    assert lines[1] == "  ✓ case 1 of 2"
    assert lines[2].startswith("  ✗ case 2 of 2 (x (5, 2)): ")


# ----------------------------------------------------------------------------- 7. first call


HEAVY = ("torch", "tensorflow", "jax", "keras", "scipy", "matplotlib", "pandas")
# What an exercise's own notebook imports in its set-up cell anyway (its call adapters hand the
# student's function tensors of that framework).
OWN_FRAMEWORK = {"ex09": {"tensorflow", "keras", "scipy", "matplotlib"}, "ex10": {"torch"}}


def test_the_first_check_of_each_release_imports_no_heavy_framework() -> None:
    """In a fresh process, check() on a release's first part (a stub student function) loads
    the frozen data only: no oracle runs, so no torch or TensorFlow comes in with it."""
    script = textwrap.dedent('''
        import json, sys
        import numpy as np
        from edu_dl.grading import CheckFailed, check
        def stub(*args):
            raise NotImplementedError()
        heavy = {}
        for path in sys.argv[1:]:
            with np.load(path) as data:
                first = json.loads(str(data["spec"]))["parts"][0]["id"]
            try:
                check(first, stub)
            except CheckFailed:
                pass
            heavy[first] = sorted(m for m in HEAVY if m in sys.modules)
        print(json.dumps(heavy))
    ''').replace("HEAVY", repr(HEAVY))
    releases = sorted((ROOT / "exercises" / "parts").glob("*.npz"))
    light = [str(p) for p in releases if p.stem not in OWN_FRAMEWORK]
    out = subprocess.run([sys.executable, "-c", script, *light], cwd=ROOT / "exercises",
                         capture_output=True, text=True, timeout=300, check=True)
    assert json.loads(out.stdout) == {k: [] for k in json.loads(out.stdout)}
    assert len(json.loads(out.stdout)) == len(light) >= 10


@pytest.mark.slow  # 2 s or more: make test-fast leaves it to make test
@pytest.mark.timing
def test_in_a_jupyter_kernel_an_endless_loop_is_stopped(hw9: Path) -> None:
    """ipykernel runs a cell in the main thread: the bound holds there, and the cell's error
    output is the report."""
    import nbformat
    from nbclient import NotebookClient

    v4 = nbformat.v4
    source = ("from edu_dl.grading import check\n"
              "def square(x):\n    while True:\n        pass\n"
              "check('hw9.square', square, timeout_s=1)")
    nb = v4.new_notebook(cells=[v4.new_code_cell(source)])
    # The loop is stopped by check()'s bound of 1 s, whatever the load. The client's bounds
    # only stop a kernel that hangs: nbclient's default of 60 s for the kernel to start was
    # passed beside eight busy processes (issue 43), so both wait as long as a hung kernel may.
    NotebookClient(nb, timeout=600, startup_timeout=600, kernel_name="python3",
                   allow_errors=True, shutdown_kernel="immediate",
                   resources={"metadata": {"path": str(hw9)}}).execute()
    (error,) = nb.cells[0].outputs
    assert error.output_type == "error" and error.ename == "CheckFailed"
    assert "time bound of 1 s ran" in checking.unwrapped("\n".join(error.traceback))
