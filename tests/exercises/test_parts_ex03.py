"""Exercise 3's parts: the solution kernels pass under the CUDA simulator, the classic mistakes get
edu_dl.gpu's hints, the stub says "not implemented yet".

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
from fixtures.exercise_helpers import SIMULATED_SOLUTIONS, checked, course_module
from fixtures.once import once_per_session

from edu_dl.grading import protocol
from edu_dl.grading.authoring import spec

SOLUTION = Path(__file__).resolve().parents[2] / "solutions" / "03_writing_a_gpu_kernel.ipynb"
ex03 = course_module("ex03")
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
def matmul_swapped(X, W, b, out):
    col, row = cuda.grid(2)
    if row < out.shape[0] and col < out.shape[1]:
        acc = b[row]
        for k in range(X.shape[1]):
            acc += X[col, k] * W[k, row]
        out[row, col] = acc if acc > 0 else 0.0

@cuda.jit
def matmul_x_on_rows(X, W, b, out):
    row, col = cuda.grid(2)
    if row < out.shape[0] and col < out.shape[1]:
        acc = b[col]
        for k in range(X.shape[1]):
            acc += X[row, k] * W[k, col]
        out[row, col] = acc if acc > 0 else 0.0

@cuda.jit
def matmul_no_bounds(X, W, b, out):
    col, row = cuda.grid(2)
    acc = b[col]
    for k in range(X.shape[1]):
        acc += X[row, k] * W[k, col]
    out[row, col] = acc if acc > 0 else 0.0

@cuda.jit
def matmul_strict(X, W, b, out):
    col, row = cuda.grid(2)
    if row < out.shape[0] - 1 and col < out.shape[1]:
        acc = b[col]
        for k in range(X.shape[1]):
            acc += X[row, k] * W[k, col]
        out[row, col] = acc if acc > 0 else 0.0

@cuda.jit
def linear_no_relu(X, W, b, out):
    col, row = cuda.grid(2)
    if row < out.shape[0] and col < out.shape[1]:
        acc = b[col]
        for k in range(X.shape[1]):
            acc += X[row, k] * W[k, col]
        out[row, col] = acc

@cuda.jit
def linear_bias_after(X, W, b, out):
    col, row = cuda.grid(2)
    if row < out.shape[0] and col < out.shape[1]:
        acc = float32(0.0)
        for k in range(X.shape[1]):
            acc += X[row, k] * W[k, col]
        out[row, col] = (acc if acc > 0 else 0.0) + b[col]

@cuda.jit
def matmul_stub(X, W, b, out):
    raise NotImplementedError()

def make_sums(threads, sync=True, last_step=True, combine=True, stride=True):
    stop = 1 if last_step else 2
    @cuda.jit
    def kernel(X, out):
        partial = cuda.shared.array(threads, float32)
        row, t = cuda.blockIdx.x, cuda.threadIdx.x
        acc = float32(0.0)
        if stride:
            for col in range(t, X.shape[1], threads):
                acc += X[row, col]
        elif t < X.shape[1]:
            acc += X[row, t]
        partial[t] = acc
        if sync:
            cuda.syncthreads()
        step = threads // 2
        while combine and step >= stop:
            if t < step:
                partial[t] += partial[t + step]
            if sync:
                cuda.syncthreads()
            step //= 2
        if t == 0:
            out[row] = partial[0]
    return kernel

def make_chunked(threads):
    # Correct, but each thread walks its own chunk (uncoalesced): the output cannot tell.
    @cuda.jit
    def kernel(X, out):
        partial = cuda.shared.array(threads, float32)
        row, t = cuda.blockIdx.x, cuda.threadIdx.x
        chunk = (X.shape[1] + threads - 1) // threads
        acc = float32(0.0)
        for col in range(t * chunk, min((t + 1) * chunk, X.shape[1])):
            acc += X[row, col]
        partial[t] = acc
        cuda.syncthreads()
        if t == 0:
            total = float32(0.0)
            for i in range(threads):
                total += partial[i]
            out[row] = total
    return kernel

make_no_sync = lambda threads: make_sums(threads, sync=False)
make_early_stop = lambda threads: make_sums(threads, last_step=False)
make_uncombined = lambda threads: make_sums(threads, combine=False)
make_unstrided = lambda threads: make_sums(threads, stride=False)
""", "<buggy>", "exec"), ns)

runs = {
    "leaky": ("ex03.leaky_relu_kernel", "leaky_relu_kernel", False),
    "leaky_hidden": ("ex03.leaky_relu_kernel", "leaky_relu_kernel", True),
    "naive": ("ex03.linear_relu", "linear_relu_kernel", False),
    "naive_hidden": ("ex03.linear_relu", "linear_relu_kernel", True),
    "row_sums": ("ex03.row_sums", "make_row_sum_kernel", False),
    "row_sums_hidden": ("ex03.row_sums", "make_row_sum_kernel", True),
    "chunked": ("ex03.row_sums", "make_chunked", True),
    "leaky_no_bounds": ("ex03.leaky_relu_kernel", "leaky_no_bounds", False),
    "relu_instead": ("ex03.leaky_relu_kernel", "relu_instead", False),
    "swapped": ("ex03.linear_relu", "matmul_swapped", False),
    "x_on_rows": ("ex03.linear_relu", "matmul_x_on_rows", False),
    "x_on_rows_hidden": ("ex03.linear_relu", "matmul_x_on_rows", True),
    "no_bounds": ("ex03.linear_relu", "matmul_no_bounds", False),
    "strict": ("ex03.linear_relu", "matmul_strict", False),
    "stub": ("ex03.linear_relu", "matmul_stub", False),
    "no_sync": ("ex03.row_sums", "make_no_sync", False),
    "early_stop": ("ex03.row_sums", "make_early_stop", False),
    "uncombined": ("ex03.row_sums", "make_uncombined", False),
    "unstrided": ("ex03.row_sums", "make_unstrided", False),
    "kernel_not_factory": ("ex03.row_sums", "linear_relu_kernel", False),
    "no_relu": ("ex03.linear_relu", "linear_no_relu", False),
    "bias_after": ("ex03.linear_relu", "linear_bias_after", False),
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


@pytest.fixture(scope="session")  # see tests/README.md: "Fixtures"
def simulated(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[bool, str]]:
    def run() -> dict[str, list[Any]]:
        env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
        env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p and Path(p).is_dir())
        proc = subprocess.run([sys.executable, "-c", CHILD, str(SOLUTION)], env=env,
                              cwd=SOLUTION.parent, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-2000:]
        line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("RESULTS"))
        found: dict[str, list[Any]] = json.loads(line[len("RESULTS"):])
        return found

    shared = once_per_session(tmp_path_factory, "ex03-simulated", run)  # both workers read it
    return {k: (ok, out) for k, (ok, out) in shared.items()}


@pytest.mark.parametrize("name", ["leaky", "leaky_hidden", "naive", "naive_hidden", "row_sums",
                                  "row_sums_hidden", "chunked"])
@pytest.mark.slow  # 2 s or more: make test-fast leaves it to make test
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
    assert not ok and "case 1 of 3 (X (8, 5), W (5, 8), b (8,), block=4)" in out
    assert "the result is the transpose of the right one" in out


def test_x_taken_for_the_row(simulated: dict[str, tuple[bool, str]]) -> None:
    """CUDA's mapping: a kernel reading `row, col = cuda.grid(2)` fails a visible case (the
    20 x 3 output) and the hidden ones, with the hint that names the mapping."""
    for name in ("x_on_rows", "x_on_rows_hidden"):
        ok, out = simulated[name]
        assert not ok and "only a corner of the result was written" in out, out
        assert "col, row = cuda.grid(2)" in out
    assert "case 3 of 3 (X (20, 5), W (5, 3), b (3,), block=4)" in simulated["x_on_rows"][1]


def test_missing_bounds_check_2d(simulated: dict[str, tuple[bool, str]]) -> None:
    ok, out = simulated["no_bounds"]
    assert not ok
    assert "case 2 of 3 (X (20, 13), W (13, 17), b (17,), block=8) failed: IndexError" in out
    assert "start the kernel with a bounds check" in out


def test_bounds_check_too_strict(simulated: dict[str, tuple[bool, str]]) -> None:
    ok, out = simulated["strict"]
    assert not ok and "got contains 8 inf/nan" in out and "one too strict" in out


def test_stub_kernel(simulated: dict[str, tuple[bool, str]]) -> None:
    ok, out = simulated["stub"]
    assert not ok and out.strip() == "✗ ex03.linear_relu: not implemented yet"


def test_missing_syncthreads(simulated: dict[str, tuple[bool, str]]) -> None:
    ok, out = simulated["no_sync"]
    assert not ok and "inf/nan" in out and "call cuda.syncthreads()" in out


@pytest.mark.parametrize(("name", "hint"), [
    ("early_stop", "the halving loop stops one step too early"),
    ("uncombined", "thread 0's own partial sum only"),
    ("unstrided", "only the first `threads` elements of each row were added"),
])
def test_reduction_mistakes_get_their_hints(simulated: dict[str, tuple[bool, str]], name: str,
                                            hint: str) -> None:
    ok, out = simulated[name]
    assert not ok and hint in out, out


@pytest.mark.parametrize(("name", "hint"), [
    ("no_relu", "the layer's ReLU is missing"),
    ("bias_after", "your bias is added after the ReLU"),
])
def test_layer_mistakes_get_their_hints(simulated: dict[str, tuple[bool, str]], name: str,
                                        hint: str) -> None:
    ok, out = simulated[name]
    assert not ok and hint in out, out


def test_kernel_instead_of_factory(simulated: dict[str, tuple[bool, str]]) -> None:
    ok, out = simulated["kernel_not_factory"]
    assert not ok and "pass the factory make_row_sum_kernel" in out


# --------------------------------------------------------------------------- in this process


def _global_index(block_idx: int, block_dim: int, thread_idx: int) -> int:
    return block_idx * block_dim + thread_idx


@pytest.mark.parametrize("seed", [None, 0, 1])
def test_global_index_oracle(seed: int | None) -> None:
    part = next(p for p in ex03.PARTS if p.id == "ex03.global_index")
    for args in protocol.roundtrip(part.cases(np.random.default_rng(seed or 0), seed is not None)):
        assert part.compare(part.expected(*args), _global_index(*args)).ok


def test_global_index_hints(capsys: pytest.CaptureFixture[str]) -> None:
    ok, out = checked("ex03.global_index", lambda b, d, t: b * t + t)
    assert not ok
    assert "case 2 of 4 (block_idx=2, block_dim=128, thread_idx=5): expected 261, got 15" in out
    assert "by the block's SIZE" in out
    ok, out = checked("ex03.global_index", lambda b, d, t: b + t)
    assert not ok
    assert "blockIdx.x counts blocks" in out
    assert capsys.readouterr().out == ""  # a failing check() prints nothing: it raises


@pytest.mark.parametrize("part", ex03.PARTS, ids=lambda p: p.id)
def test_stub_without_a_kernel_process(capsys: pytest.CaptureFixture[str],
                                       part: spec.Part) -> None:
    def stub(*args: Any) -> Any:
        raise NotImplementedError()

    if part.id == "ex03.global_index" or part.id == "ex03.row_sums":
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
    for part in ex03.PARTS[1:]:
        for hidden in (False, True):
            for seed in range(5):
                for args in part.cases(np.random.default_rng(seed), hidden):
                    block = int(args[-1])
                    if part.id == "ex03.leaky_relu_kernel":
                        threads = -(-len(args[0]) // block) * block
                    elif part.id == "ex03.row_sums":
                        threads = args[0].shape[0] * block
                    else:
                        m, n = args[0].shape[0], args[1].shape[1]
                        threads = -(-m // block) * -(-n // block) * block * block
                    assert threads <= 24 * 24
