"""Exercise 2b's parts: the solution kernels pass under the CUDA simulator, the classic mistakes get
edu_dl.cuda's hints, the stub says "not implemented yet".

The kernels run in ONE fresh process with NUMBA_ENABLE_CUDASIM=1 (this process may hold the real
numba.cuda already); sizes are the parts' own small cases.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from exercise_helpers import SIMULATED_SOLUTIONS, checked, course_module

from edu_dl.grading import protocol, spec

SOLUTION = Path(__file__).resolve().parents[1] / "solutions" / "02b_writing_a_gpu_kernel.ipynb"
ex02b = course_module("ex02b")
pytestmark = pytest.mark.usefixtures("in_solutions")  # check() finds ./parts there

CHILD = SIMULATED_SOLUTIONS + r'''
import contextlib, io, json
exec(compile(r"""
@cuda.jit
def leaky_no_bounds(x, alpha, out):
    i = cuda.grid(1)
    out[i] = x[i] if x[i] > 0 else alpha * x[i]

@cuda.jit
def relu_instead(x, alpha, out):
    i = cuda.grid(1)
    if i < out.shape[0]:
        out[i] = x[i] if x[i] > 0 else 0.0

@cuda.jit
def matmul_swapped(A, B, C):
    row, col = cuda.grid(2)
    if row < C.shape[0] and col < C.shape[1]:
        acc = float32(0.0)
        for k in range(A.shape[1]):
            acc += A[col, k] * B[k, row]
        C[row, col] = acc

@cuda.jit
def matmul_no_bounds(A, B, C):
    row, col = cuda.grid(2)
    acc = float32(0.0)
    for k in range(A.shape[1]):
        acc += A[row, k] * B[k, col]
    C[row, col] = acc

@cuda.jit
def matmul_strict(A, B, C):
    row, col = cuda.grid(2)
    if row < C.shape[0] - 1 and col < C.shape[1]:
        acc = float32(0.0)
        for k in range(A.shape[1]):
            acc += A[row, k] * B[k, col]
        C[row, col] = acc

@cuda.jit
def matmul_stub(A, B, C):
    raise NotImplementedError()

def make_no_sync(tile):
    @cuda.jit
    def kernel(A, B, C):
        sA = cuda.shared.array((tile, tile), float32)
        sB = cuda.shared.array((tile, tile), float32)
        row, col = cuda.grid(2)
        tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
        acc = float32(0.0)
        for t in range((A.shape[1] + tile - 1) // tile):
            k_a, k_b = t * tile + ty, t * tile + tx
            sA[tx, ty] = A[row, k_a] if row < A.shape[0] and k_a < A.shape[1] else 0.0
            sB[tx, ty] = B[k_b, col] if k_b < B.shape[0] and col < B.shape[1] else 0.0
            for kk in range(tile):
                acc += sA[tx, kk] * sB[kk, ty]
        if row < C.shape[0] and col < C.shape[1]:
            C[row, col] = acc
    return kernel
""", "<buggy>", "exec"), ns)

runs = {
    "leaky": ("ex02b.leaky_relu_kernel", "leaky_relu_kernel", False),
    "leaky_hidden": ("ex02b.leaky_relu_kernel", "leaky_relu_kernel", True),
    "naive": ("ex02b.matmul_naive", "matmul_kernel", False),
    "naive_hidden": ("ex02b.matmul_naive", "matmul_kernel", True),
    "tiled": ("ex02b.matmul_tiled", "make_tiled_kernel", False),
    "tiled_hidden": ("ex02b.matmul_tiled", "make_tiled_kernel", True),
    "leaky_no_bounds": ("ex02b.leaky_relu_kernel", "leaky_no_bounds", False),
    "relu_instead": ("ex02b.leaky_relu_kernel", "relu_instead", False),
    "swapped": ("ex02b.matmul_naive", "matmul_swapped", False),
    "no_bounds": ("ex02b.matmul_naive", "matmul_no_bounds", False),
    "strict": ("ex02b.matmul_naive", "matmul_strict", False),
    "stub": ("ex02b.matmul_naive", "matmul_stub", False),
    "no_sync": ("ex02b.matmul_tiled", "make_no_sync", False),
    "kernel_not_factory": ("ex02b.matmul_tiled", "matmul_kernel", False),
}
check = ns["check"]
results = {}
for name, (part_id, fn, hidden) in runs.items():
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        try:
            ok = check(part_id, ns[fn], hidden=hidden)
        except AssertionError as failed:  # CheckFailed: its report is what a notebook shows
            ok = False
            from edu_dl.grading.checking import unwrapped  # lines wrapped at spaces, joined
            print(unwrapped(failed.report))
    results[name] = [bool(ok), buffer.getvalue()]
print("RESULTS" + json.dumps(results))
'''


@pytest.fixture(scope="module")
def simulated() -> dict[str, tuple[bool, str]]:
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p and Path(p).is_dir())
    proc = subprocess.run([sys.executable, "-c", CHILD, str(SOLUTION)], env=env,
                          cwd=SOLUTION.parent, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("RESULTS"))
    return {k: (ok, out) for k, (ok, out) in json.loads(line[len("RESULTS"):]).items()}


@pytest.mark.parametrize("name", ["leaky", "leaky_hidden", "naive", "naive_hidden", "tiled",
                                  "tiled_hidden"])
def test_solution_kernels_pass(simulated: dict[str, tuple[bool, str]], name: str) -> None:
    ok, out = simulated[name]
    assert ok and out.startswith("✓"), out
    assert "Traceback" not in out


def test_missing_bounds_check_1d(simulated: dict[str, tuple[bool, str]]) -> None:
    ok, out = simulated["leaky_no_bounds"]
    assert not ok and "case 1 of 4 (x (20,), alpha=0.1, threads_per_block=8) failed" in out
    assert "out of bounds" in out and "start the kernel with a bounds check" in out


def test_relu_instead_of_leaky(simulated: dict[str, tuple[bool, str]]) -> None:
    ok, out = simulated["relu_instead"]
    assert not ok and "hint: that is ReLU" in out


def test_swapped_indices(simulated: dict[str, tuple[bool, str]]) -> None:
    ok, out = simulated["swapped"]
    assert not ok and "case 1 of 3 (A (8, 5), B (5, 8), block=4)" in out
    assert "the result is the transpose of the right one" in out


def test_missing_bounds_check_2d(simulated: dict[str, tuple[bool, str]]) -> None:
    ok, out = simulated["no_bounds"]
    assert not ok and "case 2 of 3 (A (20, 13), B (13, 17), block=8) failed: IndexError" in out
    assert "start the kernel with a bounds check" in out


def test_bounds_check_too_strict(simulated: dict[str, tuple[bool, str]]) -> None:
    ok, out = simulated["strict"]
    assert not ok and "got contains 8 inf/nan" in out and "one too strict" in out


def test_stub_kernel(simulated: dict[str, tuple[bool, str]]) -> None:
    ok, out = simulated["stub"]
    assert not ok and out.strip() == "✗ ex02b.matmul_naive: not implemented yet"


def test_missing_syncthreads(simulated: dict[str, tuple[bool, str]]) -> None:
    ok, out = simulated["no_sync"]
    assert not ok and "inf/nan" in out and "call cuda.syncthreads()" in out


def test_kernel_instead_of_factory(simulated: dict[str, tuple[bool, str]]) -> None:
    ok, out = simulated["kernel_not_factory"]
    assert not ok and "pass the factory make_tiled_kernel" in out


# --------------------------------------------------------------------------- in this process


def _global_index(block_idx: int, block_dim: int, thread_idx: int) -> int:
    return block_idx * block_dim + thread_idx


@pytest.mark.parametrize("seed", [None, 0, 1])
def test_global_index_oracle(seed: int | None) -> None:
    part = next(p for p in ex02b.PARTS if p.id == "ex02b.global_index")
    for args in protocol.roundtrip(part.cases(np.random.default_rng(seed or 0), seed is not None)):
        assert part.compare(part.expected(*args), _global_index(*args)).ok


def test_global_index_hints(capsys: pytest.CaptureFixture[str]) -> None:
    ok, out = checked("ex02b.global_index", lambda b, d, t: b * t + t)
    assert not ok
    assert "case 2 of 4 (block_idx=2, block_dim=128, thread_idx=5): expected 261, got 15" in out
    assert "by the block's SIZE" in out
    ok, out = checked("ex02b.global_index", lambda b, d, t: b + t)
    assert not ok
    assert "blockIdx.x counts blocks" in out
    assert capsys.readouterr().out == ""  # a failing check() prints nothing: it raises


@pytest.mark.parametrize("part", ex02b.PARTS, ids=lambda p: p.id)
def test_stub_without_a_kernel_process(capsys: pytest.CaptureFixture[str],
                                       part: spec.Part) -> None:
    def stub(*args: Any) -> Any:
        raise NotImplementedError()

    if part.id == "ex02b.global_index" or part.id == "ex02b.matmul_tiled":
        ok, out = checked(part.id, stub)  # plain functions: the stub raises when called
        assert not ok
        assert out.strip() == f"✗ {part.id}: not implemented yet"
    else:  # not a @cuda.jit kernel: a clear message, no launch
        ok, out = checked(part.id, stub)
        assert not ok
        assert "decorate the function with @cuda.jit" in out
    assert capsys.readouterr().out == ""  # a failing check() prints nothing: it raises


def test_cases_stay_small() -> None:
    """The simulator runs a Python thread per CUDA thread: every case launches few blocks."""
    for part in ex02b.PARTS[1:]:
        for hidden in (False, True):
            for seed in range(5):
                for args in part.cases(np.random.default_rng(seed), hidden):
                    block = int(args[-1])
                    if part.id == "ex02b.leaky_relu_kernel":
                        threads = -(-len(args[0]) // block) * block
                    else:
                        m, n = args[0].shape[0], args[1].shape[1]
                        threads = -(-m // block) * -(-n // block) * block * block
                    assert threads <= 24 * 24
