"""edu_dl.grading.check: passes, specific failure messages with hints, and the grading mode."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from fixtures.exercise_helpers import all_course_parts, course_module, course_part

import edu_dl
from edu_dl.grading import Part, Verdict, check, checking, default_compare, protocol
from edu_dl.grading.authoring import parts, spec

pytestmark = pytest.mark.usefixtures("in_solutions")  # check() finds ./parts there

ex08 = course_module("ex08")

# ----------------------------------------------------------------------------- reference answers


def mul_backward(dout, x, y):
    return dout * y, dout * x


def relu_backward(dout, x):
    return dout * (x > 0)


def softmax_ce(logits, y):
    n = len(y)
    shifted = logits - logits.max(axis=1, keepdims=True)
    p = np.exp(shifted) / np.exp(shifted).sum(axis=1, keepdims=True)
    d = p.copy()
    d[np.arange(n), y] -= 1
    return -np.log(p[np.arange(n), y]).mean(), d / n


def softmax_xp(x):
    xp = edu_dl.get_xp(x)
    e = xp.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def run(capsys, part_id, fn, hidden=False):
    """check()'s result and its verdict: the ✓ line printed, or the raised CheckFailed's report."""
    try:
        ok = check(part_id, fn, hidden=hidden)
    except checking.CheckFailed as failed:
        assert capsys.readouterr().out == ""  # the report is the exception's, printed nowhere
        ok, out = checking.Outcome(False, failed.report), checking.unwrapped(failed.report) + "\n"
    else:
        out = capsys.readouterr().out
    assert "Traceback" not in out
    return ok, out


@pytest.mark.parametrize(("part_id", "fn"), [
    ("ex08.mul_backward", mul_backward),
    ("ex08.relu_backward", relu_backward),
    ("ex08.softmax_cross_entropy", softmax_ce),
    ("ex02.gflops", lambda n, s: 2 * n**3 / s / 1e9),
    ("ex02.peak_bandwidth", lambda m, b, c: m * b * c),
    ("ex02.softmax_xp", softmax_xp),
])
@pytest.mark.parametrize("hidden", [False, True])
def test_right_answers_pass(capsys, part_id, fn, hidden):
    ok, out = run(capsys, part_id, fn, hidden)
    kind = "hidden cases" if hidden else "cases"
    assert ok
    assert out.startswith(f"✓ {part_id}: ") and f"{kind} passed" in out


# ----------------------------------------------------------------------------- typical mistakes


def test_relu_prime_of_zero_shows_first_differing_entries_and_hint(capsys):
    ok, out = run(capsys, "ex08.relu_backward", lambda d, x: d * (x >= 0))
    assert not ok
    assert "entries differ" in out and "max abs error" in out
    # the differing entries are exactly where x == 0: expected 0 there
    assert "[0, 0]: expected 0 vs got" in out
    assert "relu'(0) = 0" in out


def test_softmax_without_mean_and_without_max_shift(capsys):
    def no_mean(logits, y):
        loss, d = softmax_ce(logits, y)
        return loss, d * len(y)

    ok, out = run(capsys, "ex08.softmax_cross_entropy", no_mean)
    assert not ok and "output 1 (dlogits)" in out and "divide the gradient by N" in out

    def naive(logits, y):
        with np.errstate(over="ignore", invalid="ignore"):
            p = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
            d = p.copy()
            d[np.arange(len(y)), y] -= 1
            return -np.log(p[np.arange(len(y)), y]).mean(), d / len(y)

    ok, out = run(capsys, "ex08.softmax_cross_entropy", naive)
    assert not ok
    assert "case 4 of 4" in out and "got nan" in out and "subtract each row's maximum" in out


def test_scalar_answers_show_expected_and_got(capsys):
    ok, out = run(capsys, "ex02.gflops", lambda n, s: n**3 / s / 1e9)
    assert not ok
    assert "case 1 of 2 (n=1000, seconds=0.05): expected 40, got 20" in out
    assert "2 FLOPs" in out
    ok, out = run(capsys, "ex02.peak_bandwidth", lambda m, b, c: m * b * c * 8)
    assert "expected 93866.9" in out and "already in bytes" in out


def test_device_agnostic_part_rejects_numpy_by_name(capsys):
    def softmax_np(x):
        e = np.exp(x - x.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)

    ok, out = run(capsys, "ex02.softmax_xp", softmax_np)
    assert not ok and "still names NumPy" in out and "get_xp" in out


def test_not_implemented_yet(capsys):
    def stub(dout, x):
        # YOUR CODE HERE
        raise NotImplementedError()

    ok, out = run(capsys, "ex08.relu_backward", stub)
    assert not ok
    assert out == "✗ ex08.relu_backward: not implemented yet\n"


def test_other_exceptions_name_type_message_and_student_line(capsys):
    def broken(dout, x):
        return dout @ x  # a (2, 3) @ (2, 3) product

    ok, out = run(capsys, "ex08.relu_backward", broken)
    assert not ok
    assert "raised: ValueError: matmul" in out
    assert "\n      at line " in out and "in broken: return dout @ x" in out  # a line of its own


def test_unknown_part_fails_with_a_readable_report(capsys):
    ok, out = run(capsys, "ex08.nope", relu_backward)
    assert not ok and "unknown part" in out and "ex08.relu_backward" in out
    ok, out = run(capsys, "ex99.x", relu_backward)
    assert not ok and "no exercise 'ex99'" in out


def test_a_failing_check_raises_an_assertion_error_that_ipython_shows_as_its_report(capsys):
    """nbgrader, nbval and pytest count a test cell as failed only when it raises: a failing
    check() raises CheckFailed, an AssertionError, and prints nothing; a pass prints its ✓ line."""
    with pytest.raises(AssertionError) as info:
        check("ex08.relu_backward", lambda d, x: d * (x >= 0))
    failed = info.value
    assert isinstance(failed, checking.CheckFailed)
    assert capsys.readouterr() == ("", "")  # nothing on stdout, nothing on stderr
    assert str(failed) == failed.report and failed.report.startswith("✗ ex08.relu_backward: ")
    assert "\n      hint: " in failed.report  # on its own line, under the failing case
    assert failed._render_traceback_() == failed.report.splitlines()  # IPython: no traceback
    assert failed.__cause__ is None and failed.__suppress_context__ is False
    passed = check("ex08.relu_backward", relu_backward)
    assert passed and passed.report == capsys.readouterr().out.rstrip("\n")


def test_an_error_in_the_checker_fails_the_cell_and_keeps_its_cause(capsys, monkeypatch):
    def broken_spec(part_id, fn, hidden, timeout_s):
        raise ZeroDivisionError("division by zero")

    monkeypatch.setattr(checking, "_check", broken_spec)
    with pytest.raises(checking.CheckFailed) as info:
        check("ex08.relu_backward", relu_backward)
    assert info.value.report == ("✗ ex08.relu_backward: internal error in the checker "
                                 "(ZeroDivisionError: division by zero)")
    assert isinstance(info.value.__cause__, ZeroDivisionError)  # for whoever fixes the part
    assert capsys.readouterr() == ("", "")


def test_a_function_that_writes_into_its_inputs_fails_naming_them(capsys):
    """Right values, but the caller's arrays overwritten: a failure naming each argument; the
    oracle and the next check still see the inputs as drawn."""
    def overwrite(dout, x):
        result = dout * (x > 0)
        x[...] = 1.0
        dout[...] = 0.0
        return result

    ok, out = run(capsys, "ex08.relu_backward", overwrite)
    assert not ok
    assert "your function wrote into its arguments `dout` (6 of 6 entries), `x` (" in out
    assert run(capsys, "ex08.relu_backward", relu_backward)[0]


# ----------------------------------------------------------------------------- the oracles


@pytest.mark.parametrize("hidden", [False, True])
def test_numeric_oracles_match_closed_forms(hidden):
    """The gradient-check oracles agree with the textbook formulas (and torch, for relu); the
    other parts' oracles meet the solutions in test_parts_ex08.py."""
    closed = {
        "ex08.mul_backward": mul_backward,
        "ex08.relu_backward": relu_backward,
        "ex08.softmax_cross_entropy": softmax_ce,
    }
    assert set(closed) <= {p.id for p in ex08.PARTS}
    for part_id, formula in closed.items():
        part = course_part(part_id)
        for args in part.cases(np.random.default_rng(1), hidden):
            verdict = part.compare(part.expected(*args), formula(*args))
            assert verdict.ok, f"{part_id}: {verdict.message}"


def test_every_part_is_well_formed(in_solutions: Path) -> None:
    all_parts = all_course_parts()
    ids = [p.id for p in all_parts]
    assert len(ids) == len(set(ids))
    assert {"ex02", "ex08"} <= set(parts.part_files(in_solutions))
    for part in all_parts:
        assert course_part(part.id) is part and part.points > 0
        for hidden in (False, True):
            cases = part.cases(np.random.default_rng(3), hidden)
            assert cases, part.id
            # What the sandbox gets is serializable without pickle (a withheld value never
            # goes there)
            protocol.encode_cases([spec.given(case) for case in cases])
    visible = ex08.PARTS[0].cases(np.random.default_rng(checking.VISIBLE_SEED), False)
    hidden = ex08.PARTS[0].cases(np.random.default_rng(checking.HIDDEN_SEED), True)
    assert [a[0].shape for a in visible] != [a[0].shape for a in hidden]


# ----------------------------------------------------------------------------- compare


def test_default_compare_messages():
    assert default_compare(np.ones(3), np.ones(3)).ok
    assert default_compare(np.ones(3), np.ones(3, dtype=int)).ok  # ints and floats compare
    assert "expected number values" in default_compare(np.ones(3), np.ones(3) > 0).message
    assert "expected a tuple of 2" in default_compare((1.0, 2.0), 1.0).message
    assert "expected 2 outputs, got 3" in default_compare((1.0, 2.0), (1, 2, 3)).message
    assert "not an array" in default_compare(np.ones(2), None).message or \
        "got a NoneType" in default_compare(np.ones(2), None).message
    bad = default_compare(np.zeros((2, 2)), np.array([[0, 1], [0, 3.0]]))
    assert not bad.ok
    assert "2 of 4 entries differ" in bad.message
    assert "\n  [0, 1]: expected 0 vs got 1\n  [1, 1]: expected 0 vs got 3" in bad.message
    assert bad.output is None and default_compare((1.0, 2.0), (1.0, 3.0)).output == 1
    assert isinstance(bad, Verdict)


# ----------------------------------------------------------------------------- grading mode


def test_grading_mode_records_results_and_compares_nothing(tmp_path: Path, monkeypatch, capsys):
    part: Part = course_part("ex08.relu_backward")
    cases = part.cases(np.random.default_rng(12345), True)  # the grader's fresh draw
    protocol.write_inputs(tmp_path / "inputs" / "ex08.relu_backward.npz", cases)
    monkeypatch.setenv(protocol.GRADING_ENV, str(tmp_path))

    def wrong_on_second(dout, x):
        if dout.shape == cases[1][0].shape and np.array_equal(dout, cases[1][0]):
            raise RuntimeError("boom")
        return dout * (x >= 0)  # wrong at x == 0: still only recorded, never judged here

    assert check("ex08.relu_backward", wrong_on_second)
    assert check("ex08.relu_backward", relu_backward, hidden=True)
    out = capsys.readouterr().out
    assert out == "ex08.relu_backward: results recorded for grading\n" * 2
    files = sorted(p.name for p in (tmp_path / "outputs").iterdir())
    assert files == ["ex08.relu_backward.1.npz", "ex08.relu_backward.2.npz"]

    hidden, results = protocol.read_outputs(tmp_path / "outputs" / "ex08.relu_backward.1.npz")
    assert hidden is False and len(results) == len(cases)
    assert isinstance(results[1], protocol.ErrorText) and "RuntimeError: boom" in results[1]
    assert not part.compare(part.expected(*cases[0]), results[0]).ok  # the grader sees the bug
    hidden, results = protocol.read_outputs(tmp_path / "outputs" / "ex08.relu_backward.2.npz")
    assert hidden is True
    for args, got in zip(cases, results):
        assert part.compare(part.expected(*args), got).ok


def test_grading_mode_tuples_and_non_arrays(tmp_path: Path, monkeypatch, capsys):
    cases = course_part("ex08.mul_backward").cases(np.random.default_rng(5), False)
    protocol.write_inputs(tmp_path / "inputs" / "ex08.mul_backward.npz", cases)
    monkeypatch.setenv(protocol.GRADING_ENV, str(tmp_path))
    check("ex08.mul_backward", mul_backward)
    check("ex08.mul_backward", lambda d, x, y: None)
    capsys.readouterr()
    _, results = protocol.read_outputs(tmp_path / "outputs" / "ex08.mul_backward.1.npz")
    assert isinstance(results[0], tuple) and len(results[0]) == 2
    np.testing.assert_array_equal(results[0][0], cases[0][0] * cases[0][2])
    _, results = protocol.read_outputs(tmp_path / "outputs" / "ex08.mul_backward.2.npz")
    assert all(isinstance(r, protocol.ErrorText) and "NoneType" in r for r in results)


def test_a_notebook_shows_only_the_verdict(capsys):
    """check()'s answer is true or false, but IPython displays nothing for it: no bare `True`
    printed under the ✓ line in a student's notebook."""
    from IPython.core.formatters import DisplayFormatter

    passed, out = run(capsys, "ex08.mul_backward", mul_backward)
    failed, _ = run(capsys, "ex08.mul_backward", lambda *a: None)
    assert passed and not failed and out.startswith("✓")
    assert DisplayFormatter().format(passed) == ({}, {})
    assert DisplayFormatter().format(failed) == ({}, {})


@pytest.mark.slow  # 2 s or more: make test-fast leaves it to make test
def test_in_a_jupyter_kernel_a_failing_check_is_an_error_output_showing_only_the_report(
        in_solutions: Path) -> None:
    """Run through nbclient and ipykernel, as Jupyter, nbval and nbgrader's autograde run a
    notebook: the failing cell's output is an `error` (what nbgrader scores 0) whose traceback is
    the report, nothing on stderr (which nbgrader would score 0 too, passing or not); the passing
    cell shows its ✓ line only, and Run All stops at the first failure."""
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    v4 = nbformat.v4
    sources = ["from edu_dl.grading import check\n"
               "def stub(dout, x):\n    raise NotImplementedError()",
               'check("ex08.relu_backward", stub)',
               'check("ex08.mul_backward", lambda d, x, y: (d * y, d * x))']
    nb = v4.new_notebook(cells=[v4.new_code_cell(s) for s in sources])
    client = NotebookClient(nb, timeout=120, kernel_name="python3", allow_errors=True,
                            shutdown_kernel="immediate",
                            resources={"metadata": {"path": str(in_solutions)}})
    client.execute()
    (error,) = nb.cells[1].outputs
    assert error.output_type == "error" and error.ename == "CheckFailed"
    assert error.traceback == ["✗ ex08.relu_backward: not implemented yet"]
    assert [(o.output_type, o.get("name"), o.get("text")) for o in nb.cells[2].outputs] == [
        ("stream", "stdout", "✓ ex08.mul_backward: 3 cases passed\n")]
    nb = v4.new_notebook(cells=[v4.new_code_cell(s) for s in sources])
    with pytest.raises(CellExecutionError):  # Run All without allow_errors: it stops at cell 1
        NotebookClient(nb, timeout=120, kernel_name="python3",
                       resources={"metadata": {"path": str(in_solutions)}}).execute()
    assert nb.cells[2].get("outputs") == [] and nb.cells[2].execution_count is None
