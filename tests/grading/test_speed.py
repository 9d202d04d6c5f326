"""Speed tasks: the reference, CPU time read from outside the sandbox, and the grader's ratio.

The submissions in tests/fixtures/speed/ are module
bodies as ``edu_dl.grading.stages.speed`` runs them (after
its prelude): a vectorized solution, a fast wrong answer, and three attacks on the timing.
"""

from __future__ import annotations

import io
import os
import pickle
from pathlib import Path

import numpy as np
import pytest

from edu_dl.grading import sandbox
from edu_dl.grading.stages import speed
from edu_dl.grading.stages.run import sandbox_env
from edu_dl.grading.stages.secret import VALIDATION_SECRET
from edu_dl.grading.trust.notebook import Untrusted
from edu_dl.grading.trust.speed import read_speed_outputs, source_problem
from edu_dl.speed.tasks import (
    TASKS,
    call_input,
    call_inputs,
    indicative_ratio,
    max_pool_reference,
    sgd_step_reference,
    show_indicative_ratio,
    standardize_reference,
)

HERE = Path(__file__).resolve().parents[1] / "fixtures" / "speed"
PART = "ex02.faster_standardize"
CALLS = 30  # the reference's run costs about 0.3 s of CPU: enough over the noise, quick


def submission(name: str) -> str:
    return (HERE / f"{name}.py").read_text()


def function(name: str):  # type: ignore[no-untyped-def]
    scope: dict[str, object] = {}
    exec(speed.module_text(submission(name)), scope)
    return scope["standardize"]


# --------------------------------------------------------------------------- the task itself


def test_reference_standardizes_each_channel() -> None:
    (images,) = call_inputs(TASKS[PART], seed=3, calls=1)[0]
    out = standardize_reference(images)
    assert out.shape == (8, 3, 32, 32) and out.dtype == np.float32
    assert np.allclose(out.mean(axis=(0, 2, 3)), 0, atol=1e-5)
    assert np.allclose(out.std(axis=(0, 2, 3)), 1, atol=1e-5)
    assert np.allclose(out[2, 1], (images[2, :, :, 1] - images[..., 1].mean())
                       / images[..., 1].std(), atol=1e-5)


@pytest.mark.timing
def test_solution_matches_reference_and_is_indicatively_faster() -> None:
    task = TASKS[PART]
    solve = function("solution")
    for args in call_inputs(task, seed=5, calls=3):
        assert np.allclose(solve(*args), task.reference(*args), rtol=task.rtol, atol=task.atol)
    assert indicative_ratio(task, solve, calls=2) > task.goal
    assert show_indicative_ratio(PART, solve) > task.goal


def test_the_indicative_ratio_of_a_stub_is_no_error(capsys: pytest.CaptureFixture[str]) -> None:
    def standardize(images):  # type: ignore[no-untyped-def]
        raise NotImplementedError()

    assert np.isnan(show_indicative_ratio(PART, standardize))
    assert "not implemented yet" in capsys.readouterr().out


def test_inputs_come_from_the_seed() -> None:
    task = TASKS[PART]
    first, again, other = (call_inputs(task, s, 2) for s in (1, 1, 2))
    assert all(np.array_equal(a[0], b[0]) for a, b in zip(first, again))
    assert not np.array_equal(first[0][0], other[0][0])
    assert not np.array_equal(first[0][0], first[1][0])  # fresh inputs for every call
    assert speed.seed_for(VALIDATION_SECRET, PART) == VALIDATION_SECRET.seed("ex02", PART)


def test_pooled_inputs_are_fresh_normal_arrays_from_the_seed() -> None:
    """The SGD task's X is a window of the seed's pool: standard normal, a new array every
    call (a submission that writes into its X changes no other call's), another seed's
    another; the exercise's check cases (no pool) still draw from their own stream."""
    task = TASKS["ex08.faster_sgd_step"]
    calls = call_inputs(task, 11, 200)
    X = np.stack([c[0] for c in calls])
    assert abs(X.mean()) < 0.01 and abs(X.std() - 1) < 0.01
    assert len({c[0].tobytes() for c in calls}) == 200
    calls[0][0][...] = 0.0
    assert np.array_equal(call_input(task, 11, 0)[0], call_inputs(task, 11, 1)[0][0])
    assert not np.any(call_input(task, 11, 0)[0] == 0.0)
    assert not np.array_equal(call_input(task, 12, 0)[0], call_input(task, 11, 0)[0])
    rng = np.random.default_rng(3)
    assert np.array_equal(task.inputs(np.random.default_rng(3))[0],
                          rng.standard_normal((256, 64)))


def _driver_outputs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *argv: str) -> np.ndarray:
    from edu_dl.grading import speed_driver
    from edu_dl.grading.protocol import RESULT_FD_VAR

    path = tmp_path / f"out{len(list(tmp_path.iterdir()))}.npy"
    monkeypatch.setenv(RESULT_FD_VAR, str(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)))
    assert speed_driver.main(list(argv)) == 0  # closes the descriptor
    return np.load(path)


def test_one_calls_inputs_drawn_alone_are_that_calls_inputs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A spot check draws only the calls it checks: call i's inputs drawn alone are call i's
    inputs of a whole draw, so the spot run's outputs are the big run's at those indices."""
    task = TASKS["ex08.faster_sgd_step"]
    whole = call_inputs(task, 7, 12)
    for index in (0, 5, 11):
        assert all(np.array_equal(a, b) for a, b in zip(call_input(task, 7, index), whole[index]))
    big = _driver_outputs(tmp_path, monkeypatch, task.part_id, "reference", "7", "12")
    spot = _driver_outputs(tmp_path, monkeypatch, task.part_id, "reference", "7", "2",
                           "--inputs", "12", "--only", "9,4")
    assert big.shape[0] == 12 and np.array_equal(spot, big[[9, 4]])


SOLUTIONS = {"ex02.faster_standardize": "solution", "ex08.faster_sgd_step": "sgd_step_solution",
             "ex11.faster_max_pool": "max_pool_solution"}


def test_every_task_has_a_solution_here() -> None:
    assert set(SOLUTIONS) == set(TASKS)


def test_sgd_step_reference_is_softmax_regression() -> None:
    X, y, W = call_inputs(TASKS["ex08.faster_sgd_step"], seed=4, calls=1)[0]
    new = sgd_step_reference(X, y, W, lr=0.5)
    # the gradient of the mean cross-entropy, by central differences on two weights
    def loss(W: np.ndarray) -> float:
        scores = X @ W
        scores -= scores.max(axis=1, keepdims=True)
        return float(np.mean(np.log(np.exp(scores).sum(axis=1)) - scores[np.arange(len(y)), y]))

    for index in [(0, 0), (17, 9)]:
        step = np.zeros_like(W)
        step[index] = 1e-6
        slope = (loss(W + step) - loss(W - step)) / 2e-6
        assert np.isclose((W - new)[index] / 0.5, slope, rtol=1e-4, atol=1e-8)


def test_max_pool_reference_takes_each_window_max() -> None:
    x = np.arange(2 * 1 * 4 * 4, dtype=np.float32).reshape(2, 1, 4, 4)
    assert max_pool_reference(x)[0, 0].tolist() == [[5, 7], [13, 15]]
    assert max_pool_reference(-x)[1, 0].tolist() == [[-16, -18], [-24, -26]]


@pytest.mark.parametrize("part_id", sorted(SOLUTIONS))
def test_each_solution_matches_its_reference(part_id: str) -> None:
    task = TASKS[part_id]
    scope: dict[str, object] = {}
    exec(speed.module_text(submission(SOLUTIONS[part_id])), scope)
    solve = scope[task.function]
    for args in call_inputs(task, seed=5, calls=2):
        want = task.reference(*args)
        assert want.shape == task.output_shape(*args)
        assert np.allclose(solve(*args), want, rtol=task.rtol, atol=task.atol)  # type: ignore[operator]


# --------------------------------------------------------------------------- reading outputs


def npy(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=array.dtype.hasobject)
    return buffer.getvalue()


def test_outputs_are_read_strictly() -> None:
    good = npy(np.ones((2, 3), np.float32))
    assert read_speed_outputs(good, len(good), (2, 3)).sum() == 6
    hostile = {
        "wrong shape": npy(np.ones((3, 2), np.float32)),
        "wrong dtype": npy(np.ones((2, 3), np.float64)),
        "objects": npy(np.array([[None] * 3] * 2, dtype=object)),
        "a pickle": pickle.dumps(np.ones((2, 3), np.float32)),
        "cut short": good[:-4],
        "too long": good + b"\0" * 4,
        "empty": b"",
    }
    for why, data in hostile.items():
        with pytest.raises(Untrusted):
            read_speed_outputs(data, len(data), (2, 3))
            pytest.fail(why)
    with pytest.raises(Untrusted):
        read_speed_outputs(good, len(good) + 1, (2, 3))  # the sandbox wrote more than was kept
    with pytest.raises(Untrusted):
        read_speed_outputs(good, len(good), (2, 3), limit=len(good) - 1)


# --------------------------------------------------------------------------- CPU time, outside

BUSY = "s = 0\nfor i in range(3_000_000):\n    s += i\n"
ORPHANS = """import os
done_r, done_w = os.pipe()
for _ in range(4):  # four grandchildren, orphaned at once: nobody here waits for them
    if os.fork() == 0:
        if os.fork() == 0:
            s = 0
            for i in range(1_000_000):
                s += i
            os._exit(0)  # closes its copy of done_w
        os._exit(0)
    os.wait()
os.close(done_w)
os.read(done_r, 1)  # end of file once every orphan has finished its work
# The namespace's init reaps the orphans (their CPU then counts in its children's); bwrap
# ends when this process does, so an orphan not reaped by then is lost. Were it running, the
# watchdog's samples would hold all but its last poll interval's CPU: a process ending within
# one interval of the notebook's end is the bound, at most cores x poll_s of CPU. Without this
# wait, 4 orphans of 60 ms each, ending at this very instant, were half lost on a quiet machine.
import time
time.sleep(0.3)
"""


def cpu_of(code: str) -> float:
    result = sandbox.run([sandbox.python(), "-c", code], limits=speed.LIMITS, env=sandbox_env())
    assert result.returncode == 0, result.log
    return result.cpu_s


@pytest.mark.timing
def test_cpu_time_counts_orphaned_children() -> None:
    idle, busy, orphans = cpu_of("pass"), cpu_of(BUSY), cpu_of(ORPHANS)
    assert busy - idle > 0.1  # the loop's work is seen from outside
    # 4 x 1e6 additions in orphans, 3e6 in busy: the orphans' work is not lost
    assert orphans - idle > 0.7 * (busy - idle)


# --------------------------------------------------------------------------- the grader


@pytest.mark.timing
@pytest.mark.slow
def test_solution_earns_credit() -> None:
    # Measured as graded: the task's calls, best of ROUNDS, each kind's cost per call by the
    # difference of a small and a big run (the submission's four times the reference's calls).
    found = speed.measure(PART, submission("solution"), seed=11)
    assert found.correct and found.passed, found
    rounds = len(found.reference_s)
    assert rounds == len(found.submission_s) and rounds in (1, speed.ROUNDS), found
    if rounds == 1:  # stopped early: clearly fast enough (CLEARLY_FAST), as the rule says
        assert found.ratio >= found.needed * (1 + speed.BAND) * speed.CLEARLY_FAST, found
    assert found.calls["submission"] == speed.SUBMISSION_SCALE * TASKS[PART].calls
    assert "reaches" in found.message and "per call" in found.message


@pytest.mark.timing
@pytest.mark.slow
@pytest.mark.parametrize("part_id", ["ex08.faster_sgd_step", "ex11.faster_max_pool"])
def test_the_other_tasks_solutions_earn_credit(part_id: str) -> None:
    """Measured as graded (see test_solution_earns_credit): a third of the calls in one round
    once measured the max-pool solution at 5.0x beside eight busy processes (baseline 0.31 s,
    reference 0.71 s, solution 0.39 s: 8 ticks of net work), and the SGD step's at 5.2x on a
    quieter machine, both under the 6x that earns credit."""
    found = speed.measure(part_id, submission(SOLUTIONS[part_id]), seed=11)
    assert found.correct and found.passed, found


@pytest.mark.slow
def test_fast_wrong_answer_scores_zero() -> None:
    found = speed.measure(PART, submission("wrong_fast"), seed=11, rounds=2, calls=CALLS)
    assert not found.correct and not found.passed and found.ratio == 0
    assert "differ" in found.message
    # stopped at the first wrong run: the submission's small one, before its big one
    assert len(found.runs["submission small"]) == 1 and not found.submission_s


@pytest.mark.slow
@pytest.mark.timing
def test_runs_in_pairs_give_the_same_verdicts() -> None:
    """validate's pairs (two runs side by side): a right answer is judged on speed with every
    run measured, a fast wrong one fails with the same message as one run at a time, and the
    runs the pairs started are all waited for (none outlives the measurement).

    The right answer is measured with the task's calls, as graded: with CALLS its run made 7
    clock ticks of net work, and a fresh-clone CI run read the solution at 6.0x (12-15x here).
    With the task's calls it read 9.0-15.6x beside three busy processes on two cores, so the
    pairs must not make it too slow; passing outright is test_solution_earns_credit's."""
    before = set(sandbox.watchdog._tree(os.getpid()))
    right = speed.measure(PART, submission("solution"), seed=11, pairs=True)
    assert right.correct and right.status in ("passed", speed.NEEDS_PERSON), right
    assert len(right.reference_s) == len(right.submission_s) == len(right.runs["reference small"])
    one, two = (speed.measure(PART, submission("wrong_fast"), seed=11, rounds=1, calls=CALLS,
                              pairs=pairs) for pairs in (False, True))
    assert (two.status, two.message, two.ratio) == (one.status, one.message, 0.0), (one, two)
    assert set(sandbox.watchdog._tree(os.getpid())) <= before  # no sandbox left running


# Right on the calls the reference's runs make (the first 30 here), wrong from then on: only
# the submission's big run goes further, and the spot checks there catch it.
WRONG_LATER = """calls = [0]


def standardize(images):
    calls[0] += 1
    if calls[0] > 30:
        return np.zeros((images.shape[0], 3, images.shape[1], images.shape[2]), np.float32)
    x = images.astype(np.float64)
    out = (x - x.mean(axis=(0, 1, 2))) / x.std(axis=(0, 1, 2))
    return out.astype(np.float32).transpose(0, 3, 1, 2)
"""


@pytest.mark.slow
def test_answers_past_the_references_calls_are_checked_too() -> None:
    found = speed.measure(PART, WRONG_LATER, seed=11, rounds=1, calls=CALLS)
    assert found.status == "failed" and not found.passed and "differ" in found.message, found
    # its small run (30 calls, all compared) was right: the big run's spot checks caught it
    assert len(found.runs["submission small"]) == len(found.submission_s) == 1


@pytest.mark.timing
@pytest.mark.slow
@pytest.mark.parametrize("attack", ["patched_timers", "detached_worker", "daemon_worker"])
def test_timing_attacks_earn_nothing(attack: str) -> None:
    """Each does the reference's work, hidden from a timer in its process or from its parent.

    Its true ratio is about 1x; one round of CPU time counted in clock ticks on a busy machine
    once read 2.0x (reference 0.88 s of net work, the attack 0.44 s), so the bound is the one that
    matters, well under the credit: at most half of what earns it (6x for this goal of 10x).
    Measured with the grader's rounds: a first round as clear as 1x ends there, and one that
    reads near the credit line gets the grader's second (a single round read 3.2x in a
    fresh-clone CI run of 2026-12-04)."""
    found = speed.measure(PART, submission(attack), seed=11, calls=CALLS)
    assert found.correct, found  # the answers are right: only the timing is attacked
    assert not found.passed and found.ratio <= found.needed / 2, found


@pytest.mark.slow
def test_a_crashing_submission_says_so() -> None:
    found = speed.measure(PART, "def standardize(images):\n    raise SystemExit(3)\n", seed=11,
                          rounds=1, calls=CALLS)
    assert not found.passed and "submission run" in found.message and "exit code 3" in found.message


ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timing
@pytest.mark.slow
def test_the_grader_measures_a_notebook_end_to_end(capsys: pytest.CaptureFixture[str]) -> None:
    """The solution notebook earns the speed credit; the release (a stub) earns nothing.

    Measured as graded (the task's calls, best of speed.ROUNDS), as the solution's credit is
    above: with one round of CALLS its net CPU time was a few clock ticks against a baseline
    that varies by 0.1 s, and it once measured 3.7x against the 6x that earns credit."""
    solved = ROOT / "solutions" / "02_cpu_vs_gpu.ipynb"
    assert speed.main([str(solved)]) == 0
    assert "ex02.faster_standardize: passed" in capsys.readouterr().out
    released = speed.measure_notebook(ROOT / "exercises" / "02_cpu_vs_gpu.ipynb", PART,
                                      seed=11, rounds=1, calls=CALLS)
    assert not released.passed and "NotImplementedError" in released.message


def test_a_notebook_without_the_function_says_so(tmp_path: Path) -> None:
    import nbformat

    path = tmp_path / "02_cpu_vs_gpu.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1")]), path)
    found = speed.measure_notebook(path, PART, seed=1)
    assert not found.passed and "no module-level function" in found.message
    path.write_bytes(b"{not json")
    assert not speed.measure_notebook(path, PART, seed=1).passed


GRADED_TEST = {"grade": True, "grade_id": "standardize_tests", "locked": True, "points": 1,
               "schema_version": 3, "solution": False, "task": False}


def test_a_speed_function_may_use_numpy_and_math_only(tmp_path: Path) -> None:
    """The source check before any timing: the grader's own timing defenses are tested above
    on submissions that pass it anyway (speed.measure runs whatever it is given)."""
    for name in SOLUTIONS.values():
        body = submission(name).replace("import numpy as np\n", "")
        assert source_problem(body) == "", name
    assert "imports a module" in source_problem(submission("detached_worker"))
    assert "__import__" in source_problem("def f(x):\n    return __import__('os')\n")
    assert "__builtins__" in source_problem("def f(x):\n    return x.__builtins__\n")
    assert "does not parse" in source_problem("def f(:\n")
    import nbformat

    path = tmp_path / "02_cpu_vs_gpu.ipynb"
    cells = [nbformat.v4.new_code_cell(submission("detached_worker")),
             nbformat.v4.new_code_cell('check("ex02.faster_standardize", standardize)',
                                       metadata={"nbgrader": GRADED_TEST})]
    nbformat.write(nbformat.v4.new_notebook(cells=cells), path)
    found = speed.measure_notebook(path, PART, seed=1)
    assert not found.passed and "imports a module" in found.message and not found.runs
