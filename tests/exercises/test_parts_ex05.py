"""Exercise 5's parts: each typical mistake gets its own hint, the lecture's code re-typed does
not pass, the fused layer norm's source checks refuse NumPy and NumPy's reductions, and no
solution is lecture code copied. (The solutions pass and stubs are "not implemented yet" in
test_parts_trusted.py.)"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import nbformat
import numpy as np
import pytest
from fixtures.exercise_helpers import (
    code_lines,
    course_module,
    lecture_outputs,
    longest_shared_run,
    run_check,
)
from numba import njit

from edu_dl.gpu.transactions import warp_segments
from edu_dl.grading.authoring import source
from edu_dl.grading.trust.source import find_source

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "solutions" / "05_the_gpu_memory_system.ipynb"
LECTURE = ROOT / "lectures" / "05_the_gpu_memory_system.ipynb"
ex05 = course_module("ex05")
pytestmark = pytest.mark.usefixtures("in_solutions")  # check() finds ./parts there

Block = tuple[int, int]


# --------------------------------------------------------------------------- launch segments


def counted(block: Block, grid: Block, coefficients: tuple[int, int, int], itemsize: int,
            warps: Any, per_warp: Any = warp_segments) -> int:
    """A whole launch counted with a given (possibly wrong) model of warps and segments."""
    (bx, by), (gx, gy) = block, grid
    a, b, c = coefficients
    total = 0
    for block_y in range(gy):
        for block_x in range(gx):
            for warp in warps(bx, by):
                total += per_warp([a * (block_x * bx + tx) + b * (block_y * by + ty) + c
                                   for tx, ty in warp], itemsize)
    return total


def rows_of_threads(bx: int, by: int) -> list[list[tuple[int, int]]]:
    """The lecture's picture taken literally: every row of threads is a warp (split at 32)."""
    return [[(tx, ty) for tx in range(start, min(start + 32, bx))]
            for ty in range(by) for start in range(0, bx, 32)]


def y_first(bx: int, by: int) -> list[list[tuple[int, int]]]:
    threads = [(tid // by, tid % by) for tid in range(bx * by)]
    return [threads[s:s + 32] for s in range(0, len(threads), 32)]


def x_first(bx: int, by: int) -> list[list[tuple[int, int]]]:
    threads = [(tid % bx, tid // bx) for tid in range(bx * by)]
    return [threads[s:s + 32] for s in range(0, len(threads), 32)]


def across_blocks(block: Block, grid: Block, coefficients: tuple[int, int, int],
                  itemsize: int) -> int:
    (bx, by), (gx, gy) = block, grid
    a, b, c = coefficients
    width = bx * gx
    indices = [a * (t % width) + b * (t // width) + c for t in range(width * by * gy)]
    return sum(warp_segments(indices[s:s + 32], itemsize) for s in range(0, len(indices), 32))


def from_first_address(indices: list[int], itemsize: int) -> int:
    first = min(indices) * itemsize
    return len({(i * itemsize - first) // 32 for i in indices})


SEGMENT_MISTAKES = {
    "rows of threads": (lambda *a: counted(*a, warps=rows_of_threads),
                        "a warp spans several rows of threads"),
    "y first": (lambda *a: counted(*a, warps=y_first),
                "your warps take consecutive threadIdx.y first"),
    "across blocks": (across_blocks, "a warp never spans two blocks"),
    "one per thread": (lambda *a: counted(*a, warps=x_first, per_warp=lambda i, s: len(i)),
                       "one transaction per thread"),
    "bytes / 32": (lambda *a: counted(*a, warps=x_first,
                                      per_warp=lambda i, s: -(-len(i) * s // 32)),
                   "assumes every warp is perfectly coalesced"),
    "not aligned": (lambda *a: counted(*a, warps=x_first, per_warp=from_first_address),
                    "segments are aligned"),
}


@pytest.mark.parametrize("mistake", SEGMENT_MISTAKES)
def test_each_segment_mistake_gets_its_hint(capsys: pytest.CaptureFixture[str],
                                            mistake: str) -> None:
    fn, hint = SEGMENT_MISTAKES[mistake]
    ok, out = run_check(capsys, "ex05.launch_segments", fn)
    assert not ok and "hint: " in out and hint in out, out


def test_the_right_model_passes_with_no_hint(capsys: pytest.CaptureFixture[str]) -> None:
    ok, out = run_check(capsys, "ex05.launch_segments",
                        lambda *a: counted(*a, warps=x_first))
    assert ok and "hint" not in out


def test_the_lectures_one_row_warp_does_not_pass(capsys: pytest.CaptureFixture[str]) -> None:
    """Lecture 05 counts warps of blocks 32 threads wide, one row of threads each; that model
    re-typed for every block is wrong for the visible 16 x 4 and 10 x 3 blocks."""
    def lecture_model(block: Block, grid: Block, coefficients: tuple[int, int, int],
                      itemsize: int) -> int:
        (bx, by), (gx, gy) = block, grid
        a, b, c = coefficients
        lane = np.arange(bx)
        return sum(warp_segments(a * (block_x * bx + lane) + b * (block_y * by + ty) + c,
                                 itemsize)
                   for block_y in range(gy) for block_x in range(gx) for ty in range(by)
                   ) if bx <= 32 else -1

    ok, out = run_check(capsys, "ex05.launch_segments", lecture_model)
    assert not ok and "a warp spans several rows of threads" in out, out


# --------------------------------------------------------------------------- fused layer norm


@njit
def ln_unbiased(x, gamma, beta, eps):  # type: ignore[no-untyped-def]
    out = np.empty_like(x)
    for r in range(x.shape[0]):
        mean = x[r].astype(np.float64).sum() / x.shape[1]
        squares = ((x[r] - mean) ** 2).sum()
        out[r] = gamma * (x[r] - mean) / np.sqrt(squares / (x.shape[1] - 1) + eps) + beta
    return out


def make_layer_norm(eps_on_std: bool = False, use_eps: bool = True, swap: bool = False,
                    affine: bool = True, columns: bool = False) -> Any:
    """A compiled layer norm with one mistake switched on (float64 accumulation throughout)."""
    @njit
    def layer_norm(x, gamma, beta, eps):  # type: ignore[no-untyped-def]
        data = x.T.copy() if columns else x
        out = np.empty(data.shape, dtype=np.float64)
        for r in range(data.shape[0]):
            mean = data[r].astype(np.float64).sum() / data.shape[1]
            var = ((data[r] - mean) ** 2).sum() / data.shape[1]
            e = eps if use_eps else 0.0
            out[r] = (data[r] - mean) / (np.sqrt(var) + e if eps_on_std else np.sqrt(var + e))
        if columns:
            out = out.T.copy()
        if affine:
            out = (beta * out + gamma) if swap else (gamma * out + beta)
        return out.astype(np.float32)

    return layer_norm


LAYER_NORM_MISTAKES = {
    "divides by D - 1": (ln_unbiased, "divides by D - 1"),
    "eps on the std": (make_layer_norm(eps_on_std=True), "eps belongs under the square root"),
    "no eps": (make_layer_norm(use_eps=False), "eps is missing"),
    "columns": (make_layer_norm(columns=True), "you normalized each column"),
    "swapped": (make_layer_norm(swap=True), "gamma and beta are swapped"),
    "no affine": (make_layer_norm(affine=False), "gamma and the shift beta are missing"),
}


@pytest.mark.slow  # 2 s or more: make test-fast leaves it to make test
@pytest.mark.parametrize("mistake", LAYER_NORM_MISTAKES)
def test_each_layer_norm_mistake_gets_its_hint(capsys: pytest.CaptureFixture[str],
                                               mistake: str) -> None:
    fn, hint = LAYER_NORM_MISTAKES[mistake]
    ok, out = run_check(capsys, "ex05.fused_layer_norm", fn)
    assert not ok and "hint: " in out and hint in out, out


def test_a_right_compiled_layer_norm_passes(capsys: pytest.CaptureFixture[str]) -> None:
    ok, out = run_check(capsys, "ex05.fused_layer_norm", make_layer_norm())
    assert ok and "hint" not in out


@njit
def ln_float32_one_pass(x, gamma, beta, eps):  # type: ignore[no-untyped-def]
    out = np.empty_like(x)
    for r in range(x.shape[0]):
        total = np.float32(0.0)
        squares = np.float32(0.0)
        for d in range(x.shape[1]):  # E[x²] - E[x]² in float32: cancels under a large mean
            total += x[r, d]
            squares += x[r, d] * x[r, d]
        mean = total / np.float32(x.shape[1])
        var = squares / np.float32(x.shape[1]) - mean * mean
        for d in range(x.shape[1]):
            out[r, d] = gamma[d] * (x[r, d] - mean) / np.sqrt(var + np.float32(eps)) + beta[d]
    return out


def test_float32_sums_of_squares_fail_on_a_large_mean(capsys: pytest.CaptureFixture[str]) -> None:
    """The contract's rows with mean 1000: E[x²] - E[x]² accumulated in float32 is far off."""
    ok, out = run_check(capsys, "ex05.fused_layer_norm", ln_float32_one_pass)
    assert not ok and "case 3" in out, out


def numpy_layer_norm(x, gamma, beta, eps):  # type: ignore[no-untyped-def]
    mean = x.astype(np.float64).mean(axis=1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=1, keepdims=True)
    return (gamma * (x - mean) / np.sqrt(var + eps) + beta).astype(np.float32)


def test_numpy_gets_the_values_but_is_told_to_compile(capsys: pytest.CaptureFixture[str]) -> None:
    ok, out = run_check(capsys, "ex05.fused_layer_norm", numpy_layer_norm)
    assert not ok and "decorate it with @njit" in out, out


PASTED = '''
@njit
def layer_norm(x, gamma, beta, eps):
    out = np.empty_like(x)
    for r in range(x.shape[0]):
        row = x[r].astype(np.float64)
        out[r] = gamma * (row - row.mean()) / np.sqrt(row.var() + eps) + beta
    return out
'''


def test_the_source_checks_refuse_numpy_and_its_reductions() -> None:
    """The grader's judgement of the submitted source: plain NumPy, and a compiled function that
    calls NumPy's mean and var, are refused; the solution's source passes."""
    part = next(p for p in ex05.PARTS if p.id == "ex05.fused_layer_norm")
    assert part.source_check is not None
    plain = part.source_check("def layer_norm(x, gamma, beta, eps):\n    return x\n")
    assert not plain.ok and "@njit" in plain.message
    reductions = part.source_check(PASTED.strip() + "\n")
    assert not reductions.ok and "mean, var and std" in reductions.message
    found = find_source(nbformat.read(NOTEBOOK, as_version=4), part.id)
    assert found is not None and source.judge_source(part, found).ok


@njit
def ln_in_place(x, gamma, beta, eps):  # type: ignore[no-untyped-def]
    for r in range(x.shape[0]):
        mean = x[r].astype(np.float64).sum() / x.shape[1]
        var = ((x[r] - mean) ** 2).sum() / x.shape[1]
        x[r] = gamma * (x[r] - mean) / np.sqrt(var + eps) + beta
    return x


def test_writing_into_x_is_caught(capsys: pytest.CaptureFixture[str]) -> None:
    ok, out = run_check(capsys, "ex05.fused_layer_norm", ln_in_place)
    assert not ok and "wrote into its argument `x`" in out, out


# --------------------------------------------------------------------------- nothing re-typed


def test_no_solution_is_lecture_05_code_retyped() -> None:
    """Issue 25: no two consecutive lines of a solution appear together in lecture 05 (its code or
    printed output) or in edu_dl.gpu.transactions."""
    lecture = json.loads(LECTURE.read_text())
    texts = [code_lines("".join(c["source"])) for c in lecture["cells"]
             if c["cell_type"] == "code"]
    texts += [code_lines(text) for text in lecture_outputs(LECTURE).values()]  # printed sources
    texts.append(code_lines((ROOT / "edu_dl" / "gpu" / "transactions.py").read_text()))
    nb = nbformat.read(NOTEBOOK, as_version=4)
    bodies = [code_lines(c.source[c.source.index("### BEGIN SOLUTION"):
                                  c.source.index("### END SOLUTION")])
              for c in nb.cells if c.metadata.get("nbgrader", {}).get("solution")]
    assert len(bodies) == 2
    for body in bodies:
        assert max(longest_shared_run(body, lines) for lines in texts) <= 1
