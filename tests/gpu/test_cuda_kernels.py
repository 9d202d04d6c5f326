"""CUDA kernels under Numba's simulator, checked against NumPy; buggy kernels diagnosed.

Every simulated case runs in ONE fresh process (``run_in_simulator``), because the simulator must
be switched on before ``numba.cuda`` is first imported; this process keeps the real ``numba.cuda``.
Sizes are small (the simulator runs one Python thread per CUDA thread) and include sizes that are
not multiples of the block, where a missing bounds check shows.
"""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import numpy as np
import pytest
from numba import cuda, float32

import edu_dl
from edu_dl.gpu import (
    SimulatorError,
    blocks_for,
    diagnose,
    launch_1d,
    launch_2d,
    mistakes,
    run_in_simulator,
    simulate,
    timing,
)
from edu_dl.gpu.launch import LaunchConfig
from edu_dl.grading.authoring.hints import Rule, first_hint
from edu_dl.harness import ex03
from edu_dl.machine.hardware import matmul_flops

BLOCK = 8  # 8 x 8 = 64 simulated threads per block keeps the simulator fast
RTOL, ATOL = 1e-5, 1e-5

# ----------------------------------------------------------------- buggy kernels (the classics)


@cuda.jit
def relu_no_bounds_kernel(x, out):
    i = cuda.grid(1)
    out[i] = x[i] if x[i] > 0 else 0.0  # BUG: no `if i < x.shape[0]`


@cuda.jit
def matmul_no_bounds_kernel(A, B, C):
    col, row = cuda.grid(2)
    acc = float32(0.0)  # BUG: no bounds check
    for k in range(A.shape[1]):
        acc += A[row, k] * B[k, col]
    C[row, col] = acc


@cuda.jit
def matmul_swapped_kernel(A, B, C):
    col, row = cuda.grid(2)
    if row < C.shape[0] and col < C.shape[1]:
        acc = float32(0.0)
        for k in range(A.shape[1]):
            acc += A[col, k] * B[k, row]  # BUG: row and column swapped
        C[row, col] = acc


@cuda.jit
def matmul_strict_bounds_kernel(A, B, C):
    col, row = cuda.grid(2)
    if row < C.shape[0] - 1 and col < C.shape[1]:  # BUG: skips the last row
        acc = float32(0.0)
        for k in range(A.shape[1]):
            acc += A[row, k] * B[k, col]
        C[row, col] = acc


@cuda.jit
def matmul_tiled_no_sync_kernel(A, B, C):
    sA = cuda.shared.array((BLOCK, BLOCK), float32)
    sB = cuda.shared.array((BLOCK, BLOCK), float32)
    col, row = cuda.grid(2)
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
    acc = float32(0.0)
    for t in range((A.shape[1] + BLOCK - 1) // BLOCK):
        k_a, k_b = t * BLOCK + tx, t * BLOCK + ty
        sA[ty, tx] = A[row, k_a] if row < A.shape[0] and k_a < A.shape[1] else 0.0
        sB[ty, tx] = B[k_b, col] if k_b < B.shape[0] and col < B.shape[1] else 0.0
        # BUG: no cuda.syncthreads() here nor after the loop
        for k in range(BLOCK):
            acc += sA[ty, k] * sB[k, tx]
    if row < C.shape[0] and col < C.shape[1]:
        C[row, col] = acc


@cuda.jit
def matmul_x_on_rows_kernel(A, B, C):
    row, col = cuda.grid(2)  # BUG: x taken for the row, but launch_2d runs x along the columns
    if row < C.shape[0] and col < C.shape[1]:
        acc = float32(0.0)
        for k in range(A.shape[1]):
            acc += A[row, k] * B[k, col]
        C[row, col] = acc


@cuda.jit
def shared_one_block_writes_kernel(out):
    s = cuda.shared.array(1, float32)
    if cuda.blockIdx.x == 0 and cuda.threadIdx.x == 0:
        s[0] = 1.0
    cuda.syncthreads()
    if cuda.threadIdx.x == 0:
        out[cuda.blockIdx.x] = s[0]  # blocks > 0 read a slot that no thread of theirs wrote


# ----------------------------------------------------------------- run in the simulator process


def _launch_matmul(kernel: Any, A: np.ndarray, B: np.ndarray, grid: tuple[int, int]) -> np.ndarray:
    C = np.full((A.shape[0], B.shape[1]), np.nan, dtype=np.float32)
    kernel[grid, (BLOCK, BLOCK)](A, B, C)
    return C


def _run(name: str, *args: Any) -> Any:
    """Runs in the simulator process: one named check on NumPy arguments."""
    from edu_dl.gpu import kernels

    name = str(name)
    if name == "elementwise":
        x, y, a, threads = args
        return kernels.relu(x, int(threads)), kernels.saxpy(float(a), x, y, int(threads))
    if name == "matmul":
        A, B, block = args
        return kernels.matmul_naive(A, B, (int(block), int(block))), \
            kernels.matmul_tiled(A, B, int(block))
    if name == "matmul_default":
        A, B = args
        return kernels.matmul_tiled(A, B)
    if name == "relu_no_bounds":
        (x,) = args
        out = np.full_like(x, np.nan)
        cfg = launch_1d(x.shape[0], 32)
        relu_no_bounds_kernel[cfg.grid, cfg.block](x, out)
        return out
    if name == "shared_refill":
        out = np.zeros(3, dtype=np.float32)
        shared_one_block_writes_kernel[3, 4](out)
        return out
    A, B = args
    grid = launch_2d(A.shape[0], B.shape[1], (BLOCK, BLOCK)).grid
    if name == "grid_floor":  # BUG: n // threads blocks instead of ceil(n / threads)
        grid = (B.shape[1] // BLOCK, A.shape[0] // BLOCK)
        return _launch_matmul(kernels.matmul_naive_kernel, A, B, grid)
    kernel = {"no_bounds": matmul_no_bounds_kernel, "swapped": matmul_swapped_kernel,
              "strict": matmul_strict_bounds_kernel, "no_sync": matmul_tiled_no_sync_kernel,
              "x_on_rows": matmul_x_on_rows_kernel}[name]
    return _launch_matmul(kernel, A, B, grid)


def _matrices(rng: np.random.Generator, m: int, k: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    return (rng.standard_normal((m, k)).astype(np.float32),
            rng.standard_normal((k, n)).astype(np.float32))


def _reference(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    return A.astype(np.float64) @ B.astype(np.float64)


VECTOR_SIZES = [(1, 32), (31, 32), (32, 32), (100, 128), (129, 128), (300, 32)]
MATMUL_SIZES = [(1, 1, 1), (8, 8, 8), (10, 7, 13), (17, 9, 3), (3, 20, 5), (24, 24, 24)]
BUGGY = {  # name -> (m, k, n): sizes chosen to expose the bug
    "no_bounds": (10, 6, 10), "no_bounds_multiple": (16, 6, 16), "swapped": (12, 12, 12),
    "swapped_odd": (10, 10, 10), "strict": (10, 6, 11), "grid_floor": (12, 5, 19),
    "no_sync": (16, 16, 16), "no_sync_odd": (11, 13, 9), "x_on_rows": (20, 5, 3),
    "x_on_rows_odd": (3, 5, 20),
}


@pytest.fixture(scope="session")  # see tests/README.md: "Fixtures"
def sim() -> dict[str, Any]:
    """Inputs, and the outcome of every case, run in one simulator process."""
    rng = np.random.default_rng(0)
    cases: dict[str, tuple[Any, ...]] = {}
    for n, threads in VECTOR_SIZES:
        x, y = rng.standard_normal((2, n)).astype(np.float32)
        cases[f"elementwise_{n}_{threads}"] = ("elementwise", x, y, 2.5, threads)
    for m, k, n in MATMUL_SIZES:
        cases[f"matmul_{m}_{k}_{n}"] = ("matmul", *_matrices(rng, m, k, n), BLOCK)
    cases["matmul_default"] = ("matmul_default", *_matrices(rng, 20, 18, 17))
    cases["relu_no_bounds"] = ("relu_no_bounds", rng.standard_normal(40).astype(np.float32))
    cases["shared_refill"] = ("shared_refill",)
    for key, (m, k, n) in BUGGY.items():
        cases[key] = (key.removesuffix("_multiple").removesuffix("_odd"), *_matrices(rng, m, k, n))
    outcomes = run_in_simulator(_run, list(cases.values()), timeout_s=600)
    return {key: (case, out) for (key, case), out in zip(cases.items(), outcomes)}


# ----------------------------------------------------------------- launch configuration


@pytest.mark.parametrize(("n", "threads", "blocks"), [(0, 32, 0), (1, 32, 1), (32, 32, 1),
                                                      (33, 32, 2), (1000, 128, 8)])
def test_blocks_for_rounds_up(n: int, threads: int, blocks: int) -> None:
    assert blocks_for(n, threads) == blocks
    assert blocks * threads >= n > (blocks - 1) * threads or n == 0


def test_launch_configs_cover_every_element() -> None:
    cfg = launch_1d(129, 128)
    assert (cfg.grid, cfg.block, cfg.total_threads) == ((2,), (128,), 256)
    cfg2 = launch_2d(10, 17, (8, 8))  # x along the 17 columns, y along the 10 rows
    assert (cfg2.grid, cfg2.block, cfg2.threads_per_block) == ((3, 2), (8, 8), 64)
    assert cfg2.grid[0] * 8 >= 17 and cfg2.grid[1] * 8 >= 10
    assert launch_2d(10, 17, (16, 4)).grid == (2, 3)  # block = (threads along x, along y)


def test_launch_rejects_bad_input() -> None:
    with pytest.raises(ValueError, match="at most 1024"):
        LaunchConfig((1,), (64, 32))
    with pytest.raises(ValueError, match="blocks_for"):
        blocks_for(10, 0)


# ----------------------------------------------------------------- reference kernels vs NumPy


@pytest.mark.slow  # 2 s or more: make test-fast leaves it to make test
@pytest.mark.parametrize(("n", "threads"), VECTOR_SIZES)
def test_relu_and_saxpy_match_numpy(sim: dict[str, Any], n: int, threads: int) -> None:
    (_, x, y, a, _), outcome = sim[f"elementwise_{n}_{threads}"]
    relu, saxpy = outcome.unwrap()
    np.testing.assert_array_equal(relu, np.maximum(x, 0))
    np.testing.assert_allclose(saxpy, a * x.astype(np.float64) + y, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize(("m", "k", "n"), MATMUL_SIZES)
def test_naive_and_tiled_matmul_match_numpy(sim: dict[str, Any], m: int, k: int, n: int) -> None:
    (_, A, B, _), outcome = sim[f"matmul_{m}_{k}_{n}"]
    naive, tiled = outcome.unwrap()
    assert naive.shape == tiled.shape == (m, n) and naive.dtype == np.float32
    np.testing.assert_allclose(naive, _reference(A, B), rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(tiled, _reference(A, B), rtol=RTOL, atol=ATOL)
    assert diagnose(_reference(A, B), tiled, block=BLOCK).ok


def test_tiled_matmul_default_tile_on_awkward_size(sim: dict[str, Any]) -> None:
    (_, A, B), outcome = sim["matmul_default"]
    np.testing.assert_allclose(outcome.unwrap(), _reference(A, B), rtol=RTOL, atol=ATOL)


def test_wrappers_name_the_op_and_shapes_on_bad_input() -> None:
    from edu_dl.gpu import kernels  # real numba.cuda: the checks run before any launch

    with pytest.raises(ValueError, match=r"matmul_tiled: .*A \(2, 3\) and B \(2, 3\)"):
        kernels.matmul_tiled(np.ones((2, 3)), np.ones((2, 3)))
    with pytest.raises(ValueError, match=r"saxpy: .*\(3,\) and \(4,\)"):
        kernels.saxpy(1.0, np.ones(3), np.ones(4))
    with pytest.raises(ValueError, match="relu: expected a 1-D array"):
        kernels.relu(np.ones((2, 2)))


# ----------------------------------------------------------------- the classic mistakes, diagnosed


def test_missing_bounds_check_raises_in_simulator_and_is_named(sim: dict[str, Any]) -> None:
    for key in ("no_bounds", "relu_no_bounds"):
        outcome = sim[key][1]
        assert not outcome.ok and "out of bounds" in outcome.error
        d = diagnose(None, error=outcome.error)
        assert (d.ok, d.mistake) == (False, "bounds_check") and "bounds check" in d.message
    with pytest.raises(SimulatorError, match="IndexError"):
        sim["no_bounds"][1].unwrap()


def test_missing_bounds_check_hides_on_multiples_of_the_block(sim: dict[str, Any]) -> None:
    (_, A, B), outcome = sim["no_bounds_multiple"]  # why the tests need awkward sizes
    np.testing.assert_allclose(outcome.unwrap(), _reference(A, B), rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("key", ["swapped", "swapped_odd"])
def test_swapped_row_and_column_is_named(sim: dict[str, Any], key: str) -> None:
    (_, A, B), outcome = sim[key]
    got, expected = outcome.unwrap(), _reference(A, B)
    np.testing.assert_allclose(got, expected.T, rtol=RTOL, atol=ATOL)
    assert diagnose(expected, got, block=BLOCK).mistake == "swapped_indices"


@pytest.mark.parametrize("key", ["no_sync", "no_sync_odd"])
def test_missing_syncthreads_shows_as_nan_and_is_named(sim: dict[str, Any], key: str) -> None:
    (_, A, B), outcome = sim[key]
    got, expected = outcome.unwrap(), _reference(A, B)
    assert np.isnan(got).any()
    d = diagnose(expected, got, block=BLOCK)
    assert d.mistake == "missing_syncthreads" and "syncthreads" in d.message


@pytest.mark.parametrize("key", ["strict", "grid_floor"])
def test_unwritten_edges_are_named(sim: dict[str, Any], key: str) -> None:
    (_, A, B), outcome = sim[key]
    got, expected = outcome.unwrap(), _reference(A, B)
    assert np.isnan(got).any() and not np.isnan(got[: BLOCK, : BLOCK]).any()
    assert diagnose(expected, got, block=BLOCK).mistake == "edges"
    # Without the block size the NaN cannot be placed: it reads as a missing syncthreads.
    assert diagnose(expected, got).mistake == "missing_syncthreads"


@pytest.mark.parametrize("key", ["x_on_rows", "x_on_rows_odd"])
def test_x_taken_for_the_row_is_named(sim: dict[str, Any], key: str) -> None:
    """`row, col = cuda.grid(2)` under launch_2d (x along the columns): on a tall or a wide C
    most of it stays unwritten, and the hint says which mapping to use."""
    (_, A, B), outcome = sim[key]
    got, expected = outcome.unwrap(), _reference(A, B)
    written = ~np.isnan(got)
    assert 0 < written.sum() < got.size  # 20 x 3 with 8 x 8 blocks: a 8 x 3 corner of 60
    np.testing.assert_allclose(got[written], expected[written], rtol=RTOL, atol=ATOL)
    d = diagnose(expected, got, block=BLOCK)
    assert d.mistake == "mapping" and "col, row = cuda.grid(2)" in d.message


def test_mapping_is_not_named_for_other_mistakes() -> None:
    rng = np.random.default_rng(2)
    expected = rng.standard_normal((20, 3))
    corner = np.full_like(expected, np.nan)
    corner[:8] = expected[:8]
    assert mistakes.swapped_mapping(expected, corner, 8)
    assert not mistakes.swapped_mapping(expected, expected, 8)  # right answer
    wrong = corner.copy()
    wrong[0, 0] += 1.0
    assert not mistakes.swapped_mapping(expected, wrong, 8)  # the written part must be right
    square = np.full((8, 8), np.nan)
    assert not mistakes.swapped_mapping(np.ones((8, 8)), square, 8)  # both mappings cover it


def test_shared_memory_is_nan_in_every_block(sim: dict[str, Any]) -> None:
    out = sim["shared_refill"][1].unwrap()
    # Numba's simulator alone would hand block 1 and 2 the slot block 0 wrote (1.0).
    assert out[0] == 1.0 and np.isnan(out[1:]).all()


def test_diagnose_on_plain_arrays() -> None:
    rng = np.random.default_rng(1)
    expected = rng.standard_normal((5, 5))
    assert diagnose(expected, expected.astype(np.float32)).ok
    assert diagnose(expected, expected.T).mistake == "swapped_indices"
    sym = expected + expected.T  # a symmetric result cannot look transposed
    assert diagnose(sym, sym.T).ok
    assert diagnose(expected[:, :3], expected[:, :3].T).mistake == "swapped_indices"  # shape
    assert diagnose(expected, expected[:4]).mistake == "shape"
    wrong = expected.copy()
    wrong[1, 1] += 1.0
    d = diagnose(expected, wrong, block=2)
    assert d.mistake is None and "1 of 25 entries differ; first at (1, 1)" in d.message
    assert diagnose(expected, "not an array").mistake == "type"
    assert diagnose(expected, error="ZeroDivisionError: x").mistake == "error"


def test_edge_mask_marks_partial_blocks_and_row_wraparound() -> None:
    mask = mistakes.edge_mask((5, 6), 4)
    assert mask[4].all() and mask[:, 4:].all()  # last partial block of rows and of columns
    assert mask[:, :2].all() and not mask[:4, 2:4].any()  # 4 - 6 % 4 = 2 wrapped columns
    assert not mistakes.edge_mask((8, 8), 4).any()


def test_hints_in_grader_format() -> None:
    expected = np.arange(12.0).reshape(3, 4)
    unwritten = expected.copy()
    unwritten[2] = np.nan
    rules = ex03.hints(block=2)
    assert all(isinstance(rule, Rule) for rule in rules)  # generic: a release can carry them
    for got, fragment in [(expected.T, "transpose"), (unwritten, "edges")]:
        first = first_hint(rules, expected, got, ())
        assert first is not None and fragment in first
    assert first_hint(rules, expected, expected, ()) is None


# ----------------------------------------------------------------- the simulator helpers


def test_simulate_reports_errors_and_refuses_unimportable_functions() -> None:
    with pytest.raises(TypeError, match="module-level"):
        run_in_simulator(lambda: None, [()])
    outcome = run_in_simulator("edu_dl.gpu.launch:blocks_for", [(10, 4), (10, 0)])
    assert outcome[0].unwrap() == 3
    assert outcome[1].error is not None and outcome[1].error.startswith("ValueError: blocks_for")
    with pytest.raises(SimulatorError, match="ModuleNotFoundError"):
        simulate("edu_dl.no_such_module:f")


def test_enable_simulator_refuses_after_real_import() -> None:
    code = ("from numba import cuda\nfrom edu_dl.gpu import enable_simulator\n"
            "try:\n    enable_simulator()\nexcept RuntimeError as e:\n    print(e)\n")
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=120, check=True).stdout
    assert "already imported without the simulator" in out


# ----------------------------------------------------------------- timing and peaks


def test_peak_formula_matches_published_figures() -> None:
    # NVIDIA's data sheets: V100 SXM2 15.7 TFLOP/s FP32 (80 SMs, 1530 MHz boost, sm_70);
    # H100 SXM5 67 TFLOP/s FP32 (132 SMs, 1980 MHz boost, sm_90).
    assert timing.peak_fp32_gflops(80, 1_530_000, 7, 0) == pytest.approx(15_700, rel=0.01)
    assert timing.peak_fp32_gflops(132, 1_980_000, 9, 0) == pytest.approx(67_000, rel=0.01)
    assert timing.peak_fp32_gflops(10, 1e6, 1, 0) is None  # unknown architecture: no guess


def test_time_it_synchronizes_every_run_and_gflops() -> None:
    calls: list[str] = []
    seconds = timing.time_it(lambda: calls.append("run"), repeats=3, warmup=1,
                             sync=lambda: calls.append("sync"))
    # the lecture's timer: a warm-up, then synchronize, start, run, synchronize, stop
    assert calls == ["run"] + ["sync", "run", "sync"] * 3 and seconds >= 0
    with pytest.raises(ValueError, match="repeats"):
        timing.time_it(lambda: None, repeats=0)
    assert timing.gflops(4e9, 2.0) == pytest.approx(2.0)
    assert timing.fraction_of_peak(10.0, None) is None
    with pytest.raises(ValueError, match="seconds"):
        timing.gflops(1.0, 0.0)


@pytest.mark.gpu
@pytest.mark.skipif(not edu_dl.gpu_status()[0], reason="no CUDA GPU here")
def test_kernels_on_the_gpu_match_numpy() -> None:
    from edu_dl.gpu import kernels

    rng = np.random.default_rng(0)
    A, B = _matrices(rng, 300, 200, 130)
    for fn in (kernels.matmul_naive, kernels.matmul_tiled):
        np.testing.assert_allclose(fn(A, B), _reference(A, B), rtol=1e-4, atol=1e-4)
    dA, dB = cuda.to_device(A), cuda.to_device(B)
    seconds = timing.time_it(lambda: kernels.matmul_tiled(dA, dB), repeats=3)
    peak, _ = timing.gpu_peak()
    assert peak is not None and 0 < timing.gflops(matmul_flops(300, 130, 200), seconds)
