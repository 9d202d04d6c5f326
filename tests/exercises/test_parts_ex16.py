"""Exercise 16's parts: the oracles agree with the solutions, typical mistakes get their hints."""

from __future__ import annotations

import contextlib
import inspect
import io
import itertools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import nbformat
import numpy as np
import pytest
from fixtures.exercise_helpers import (
    code_lines,
    course_module,
    course_part,
    lecture_outputs,
    longest_shared_run,
)

from edu_dl.grading import CheckFailed, check, checking
from edu_dl.grading.authoring.spec import judge_case
from edu_dl.grading.protocol import GRADING_ENV, read_outputs, roundtrip, write_inputs

pytestmark = pytest.mark.usefixtures("in_solutions")  # check() finds ./parts there

ROOT = Path(__file__).resolve().parents[2]
SOLUTION = ROOT / "solutions" / "16_many_devices.ipynb"
PART_FUNCTIONS = {
    "ex16.shard_indices": "shard_indices",
    "ex16.all_reduce_mean": "all_reduce_mean",
    "ex16.data_parallel_grad": "data_parallel_grad",
    "ex16.allreduce_traffic": "allreduce_traffic",
    "ex16.ring_all_reduce": "ring_all_reduce",
    "ex16.tensor_parallel_backward": "tensor_parallel_backward",
}


@pytest.fixture(scope="session")  # see tests/README.md: "Fixtures"
def solution() -> dict[str, Any]:
    """The solution notebook's functions: its solution cells executed in order."""
    nb = nbformat.read(SOLUTION, as_version=4)
    namespace: dict[str, Any] = {"np": np}
    for cell in nb.cells:
        if cell.cell_type == "code" and cell.metadata.get("nbgrader", {}).get("solution"):
            exec(compile(cell.source, f"<{cell.metadata['nbgrader']['grade_id']}>", "exec"),
                 namespace)
    return namespace


ex16 = course_module("ex16")


def run_check(part_id: str, fn: Callable[..., Any], hidden: bool = False) -> str:
    """What the notebook shows: the printed ✓ line, or a raised CheckFailed's report."""
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            check(part_id, fn, hidden=hidden)
    except CheckFailed as failed:
        assert out.getvalue() == ""
        return checking.unwrapped(failed.report) + "\n"  # wrapped lines joined again
    return out.getvalue()


def test_parts_and_points_match_the_notebook() -> None:
    nb = nbformat.read(SOLUTION, as_version=4)
    graded = {c.source.split('"')[1]: c.metadata["nbgrader"]["points"] for c in nb.cells
              if c.cell_type == "code" and c.metadata.get("nbgrader", {}).get("grade")}
    assert graded == {p.id: p.points for p in ex16.PARTS}
    assert set(graded) == set(PART_FUNCTIONS)


@pytest.mark.parametrize("part_id", list(PART_FUNCTIONS))
def test_fresh_hidden_cases_also_pass(solution: dict[str, Any], part_id: str) -> None:
    # The grader draws hidden cases from fresh seeds: any seed must work for the solution.
    part = course_part(part_id)
    fn = solution[PART_FUNCTIONS[part_id]]
    for seed in range(5):
        cases = roundtrip(part.cases(np.random.default_rng(seed), True))
        for i, args in enumerate(cases):
            assert judge_case(part, i, len(cases), args, part.expected(*args),
                              part.call(fn, args)).ok


def test_hidden_cases_cover_the_awkward_sizes() -> None:
    shard = roundtrip(ex16._shard_cases(np.random.default_rng(0), True))
    assert any(n < k for n, k, _ in shard)  # more workers than rows: empty shards
    assert any(n % k for n, k, _ in shard)
    ring = roundtrip(ex16._ring_cases(np.random.default_rng(0), True))
    assert any(a.shape[1] < a.shape[0] for (a,) in ring)  # fewer elements than workers
    dp = roundtrip(ex16._dp_cases(np.random.default_rng(0), False))
    assert {c[4] for c in dp} == {"mean", "sum"}
    assert any(len(c[1]) % c[3] for c in dp if c[4] == "mean")  # an uneven split, visibly


# --------------------------------------------------------------------------- typical mistakes


def test_shard_indices_that_drop_or_misplace_the_remainder() -> None:
    def dropped(n: int, k: int, rank: int) -> np.ndarray:
        return np.arange(rank * (n // k), (rank + 1) * (n // k))

    message = run_check("ex16.shard_indices", dropped)
    assert "case 3 of 6 (n=10, k=3, rank=2)" in message
    assert "[0]: expected 7 vs got 6" in message
    assert "give one extra row to each of the FIRST n % k workers" in message

    def last_takes_rest(n: int, k: int, rank: int) -> np.ndarray:
        stop = n if rank == k - 1 else (rank + 1) * (n // k)
        return np.arange(rank * (n // k), stop)

    assert "not give them all to the last worker" in run_check("ex16.shard_indices",
                                                              last_takes_rest)

    def strided(n: int, k: int, rank: int) -> np.ndarray:
        return np.arange(rank, n, k)

    assert "contiguous blocks, not every k-th row" in run_check("ex16.shard_indices", strided)


def test_all_reduce_mean_that_sums_or_returns_one_array() -> None:
    def summed(grads: list[np.ndarray]) -> list[np.ndarray]:
        total: np.ndarray = np.sum(grads, axis=0)
        return [total for _ in grads]

    message = run_check("ex16.all_reduce_mean", summed)
    assert "case 1 of 4 (grads (2, 3))" in message
    assert "divide by the number of workers k" in message

    def one_array(grads: list[np.ndarray]) -> np.ndarray:
        return np.mean(grads, axis=0)

    message = run_check("ex16.all_reduce_mean", one_array)
    assert "expected shape (2, 3), got shape (3,)" in message
    assert "return a list of k arrays" in message


def test_data_parallel_grad_that_averages_a_sum_loss(solution: dict[str, Any]) -> None:
    shard_indices = solution["shard_indices"]

    def always_average(X: np.ndarray, y: np.ndarray, w: np.ndarray, k: int,
                       reduction: str = "mean") -> np.ndarray:
        grads = []
        for r in range(k):
            rows = shard_indices(len(y), k, r)
            g = 2 * X[rows].T @ (X[rows] @ w - y[rows])
            grads.append(g / len(rows) if reduction == "mean" else g)
        mean: np.ndarray = np.mean(grads, axis=0)
        return mean

    message = run_check("ex16.data_parallel_grad", always_average)
    # The plain average is right for the equal shards of case 1 and wrong for the uneven case 2.
    assert "case 2 of 4 (X (10, 4), y (10,), w (4,), k=3, reduction='mean')" in message
    assert "the shards are unequal here" in message

    def weighted_but_averages_sums(X: np.ndarray, y: np.ndarray, w: np.ndarray, k: int,
                                   reduction: str = "mean") -> np.ndarray:
        full = 2 * X.T @ (X @ w - y)
        return full / len(y) if reduction == "mean" else full / k

    message = run_check("ex16.data_parallel_grad", weighted_but_averages_sums)
    assert "case 3 of 4" in message and "reduction='sum'" in message
    assert "max abs error" in message and "[0]: expected" in message
    assert "SUM the gradients" in message


def test_allreduce_traffic_without_biases_or_in_bits() -> None:
    def no_biases(layer_sizes: np.ndarray, dtype: str, k: int) -> tuple[int, float]:
        n = sum(int(a) * int(b) for a, b in itertools.pairwise(layer_sizes))
        grad_bytes = n * np.dtype(dtype).itemsize
        return grad_bytes, 2 * (k - 1) / k * grad_bytes

    message = run_check("ex16.allreduce_traffic", no_biases)
    assert "output 0 (gradient_bytes): expected 808880, got 808000" in message
    assert "you forgot the biases" in message

    def bits(layer_sizes: np.ndarray, dtype: str, k: int) -> tuple[int, float]:
        n = sum(int(a) * int(b) + int(b) for a, b in itertools.pairwise(layer_sizes))
        return n * np.dtype(dtype).itemsize * 8, 0.0

    assert "that is bits" in run_check("ex16.allreduce_traffic", bits)

    def wrong_ring(layer_sizes: np.ndarray, dtype: str, k: int) -> tuple[int, float]:
        n = sum(int(a) * int(b) + int(b) for a, b in itertools.pairwise(layer_sizes))
        return n * np.dtype(dtype).itemsize, (k - 1) / k * n * np.dtype(dtype).itemsize

    message = run_check("ex16.allreduce_traffic", wrong_ring)
    assert "output 1 (ring_bytes_per_worker)" in message
    assert "a ring all-reduce sends 2 (k - 1) / k" in message


def test_ring_all_reduce_mistakes(solution: dict[str, Any]) -> None:
    shard_indices = solution["shard_indices"]

    def ring(arrays: np.ndarray, gather: str = "replace",
             gather_shift: int = 1) -> tuple[np.ndarray, np.ndarray]:
        k, m = arrays.shape
        data = np.array(arrays, dtype=np.float64)
        chunks = [shard_indices(m, k, c) for c in range(k)]
        sent = np.zeros(k, dtype=np.int64)
        for phase, shift in (("reduce", 0), ("gather", gather_shift)):
            if phase == "gather" and gather == "skip":
                continue
            for s in range(k - 1):
                msgs = [(r, chunks[(r + shift - s) % k]) for r in range(k)]
                payloads = [data[r, idx].copy() for r, idx in msgs]
                for (r, idx), values in zip(msgs, payloads):
                    if phase == "reduce" or gather == "add":
                        data[(r + 1) % k, idx] += values
                    else:
                        data[(r + 1) % k, idx] = values
                    sent[r] += len(idx)
        return data, sent

    assert run_check("ex16.ring_all_reduce", ring).startswith("✓")
    message = run_check("ex16.ring_all_reduce", lambda a: ring(a, gather="skip"))
    assert "case 1 of 5 (arrays (2, 4)): output 0 (final)" in message
    assert "the all-gather must pass the complete chunks around the ring" in message
    assert "counts values twice" in run_check("ex16.ring_all_reduce",
                                              lambda a: ring(a, gather="add"))
    assert "not (r - s) % k" in run_check("ex16.ring_all_reduce",
                                          lambda a: ring(a, gather_shift=0))

    def mean(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        final, sent = ring(a)
        return final / len(a), sent

    assert "not the mean" in run_check("ex16.ring_all_reduce", mean)

    def no_count(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return ring(a)[0], np.zeros(len(a), dtype=np.int64)

    message = run_check("ex16.ring_all_reduce", no_count)
    assert "output 1 (sent)" in message and "the values are right" in message


def tensor_parallel(x: np.ndarray, w1_shards: list[np.ndarray], w2_shards: list[np.ndarray],
                    dy: np.ndarray, reduce_dx: str = "sum", mask: bool = True,
                    reduce_dw: bool = False) -> tuple[list[np.ndarray], ...]:
    """The tensor-parallel backward written afresh, with switches for the typical mistakes."""
    partial_dx, dw1, dw2 = [], [], []
    for w1_r, w2_r in zip(w1_shards, w2_shards):
        z_r = x @ w1_r
        dz_r = dy @ w2_r.T * ((z_r > 0) if mask else 1.0)
        partial_dx.append(dz_r @ w1_r.T)
        dw1.append(x.T @ dz_r)
        dw2.append(np.maximum(z_r, 0).T @ dy)
    k = len(partial_dx)
    if reduce_dx == "none":
        dx = partial_dx
    else:
        total = np.sum(partial_dx, axis=0) / (k if reduce_dx == "mean" else 1)
        dx = [total] * k
    if reduce_dw:
        dw1 = [np.sum(dw1, axis=0)] * k
    return dx, dw1, dw2


def test_tensor_parallel_backward_against_the_unsplit_block() -> None:
    # Two ranks of two hidden units each, worked by hand: ranks agree on dx, own their dw.
    x = np.array([[1.0, 2.0]])
    w1_shards = [np.array([[1.0, -1.0], [0.0, 1.0]]), np.array([[0.0, 2.0], [1.0, 0.0]])]
    w2_shards = [np.array([[1.0], [3.0]]), np.array([[-1.0], [2.0]])]
    # z = x @ w1 = [1, 1 | 2, 2]: relu passes all; dz = dy * w2.T = [1, 3 | -1, 2]
    expected = course_part("ex16.tensor_parallel_backward").expected(
        x, np.stack(w1_shards), np.stack(w2_shards), np.array([[1.0]]))
    dx, dw1, dw2 = expected
    # dz_r @ w1_r.T: (-2, 3) on rank 0, (4, -1) on rank 1; every rank gets their sum
    np.testing.assert_allclose(dx, [[[2, 2]]] * 2)
    np.testing.assert_allclose(dw1, [[[1, 3], [2, 6]], [[-1, 2], [-2, 4]]])
    np.testing.assert_allclose(dw2, [[[1], [1]], [[2], [2]]])
    assert run_check("ex16.tensor_parallel_backward", tensor_parallel).startswith("✓")
    assert run_check("ex16.tensor_parallel_backward", tensor_parallel, hidden=True).startswith("✓")


def test_tensor_parallel_backward_mistakes() -> None:
    message = run_check("ex16.tensor_parallel_backward",
                        lambda *a: tensor_parallel(*a, reduce_dx="none"))
    assert "case 1 of 4" in message and "output 0 (dx)" in message
    assert "this is where the backward pass needs its all-reduce (sum)" in message
    message = run_check("ex16.tensor_parallel_backward",
                        lambda *a: tensor_parallel(*a, reduce_dx="mean"))
    assert "output 0 (dx)" in message and "do not average" in message
    message = run_check("ex16.tensor_parallel_backward",
                        lambda *a: tensor_parallel(*a, reduce_dw=True))
    assert "output 1 (dw1_shards)" in message and "needs no communication" in message
    message = run_check("ex16.tensor_parallel_backward",
                        lambda *a: tensor_parallel(*a, mask=False))
    assert "output 0 (dx)" in message and "multiply dh_r by that mask" in message

    def pre_relu_dw2(*a: Any) -> tuple[list[np.ndarray], ...]:
        dx, dw1, _ = tensor_parallel(*a)
        return dx, dw1, [(a[0] @ w1_r).T @ a[3] for w1_r in a[1]]

    message = run_check("ex16.tensor_parallel_backward", pre_relu_dw2)
    assert "output 2 (dw2_shards)" in message and "AFTER relu" in message


def course_texts() -> dict[str, list[str]]:
    """Every lecture's code cells and printed outputs and every module of edu_dl, as code lines."""
    texts = {}
    for path in sorted((ROOT / "lectures").glob("*.ipynb")):
        for k, cell in enumerate(nbformat.read(path, as_version=4).cells):
            if cell.cell_type == "code":
                texts[f"{path.name} cell {k}"] = code_lines(cell.source)
        for k, text in lecture_outputs(path).items():  # printed sources are given away too
            texts[f"{path.name} cell {k} output"] = code_lines(text)
    for path in sorted((ROOT / "edu_dl").rglob("*.py")):
        texts[str(path.relative_to(ROOT))] = code_lines(path.read_text())
    return texts


def test_no_solution_is_course_code_retyped() -> None:
    """Issue 25: no two consecutive lines of a solution appear together in a lecture or in
    edu_dl; in particular lecture 16's tensor-parallel forward (its worker is printed there) is
    not the backward part's answer."""
    texts = course_texts()
    nb = nbformat.read(SOLUTION, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code" and cell.metadata.get("nbgrader", {}).get("solution"):
            body = code_lines(cell.source[cell.source.index("### BEGIN SOLUTION"):
                                          cell.source.index("### END SOLUTION")])
            runs = {where: longest_shared_run(body, lines) for where, lines in texts.items()}
            where = max(runs, key=runs.__getitem__)
            name = cell.metadata.nbgrader.grade_id
            assert runs[where] <= 1, f"{name}: {runs[where]} lines in a row from {where}"


def test_the_retyping_check_finds_the_lectures_worker() -> None:
    """The check above can fail: the tensor-parallel worker's lines, pasted, form a long run."""
    from edu_dl.parallel.tensor_parallel import _tensor_parallel_worker

    pasted = code_lines(inspect.getsource(_tensor_parallel_worker))
    assert max(longest_shared_run(pasted, lines) for lines in course_texts().values()) >= 8


def test_grading_mode_records_results_the_oracle_accepts(
        solution: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Outside the sandbox the grader compares what check() recorded: lists and tuples must survive.
    monkeypatch.setenv(GRADING_ENV, str(tmp_path))
    for part_id, name in PART_FUNCTIONS.items():
        part = course_part(part_id)
        cases = part.cases(np.random.default_rng(123), True)
        write_inputs(tmp_path / "inputs" / f"{part_id}.npz", cases)
        assert run_check(part_id, solution[name], hidden=True) == (
            f"{part_id}: results recorded for grading\n")
        hidden, results = read_outputs(tmp_path / "outputs" / f"{part_id}.1.npz")
        assert hidden
        decoded = roundtrip(cases)
        for i, (args, got) in enumerate(zip(decoded, results)):
            assert judge_case(part, i, len(decoded), args, part.expected(*args), got).ok
