"""Reference CUDA kernels written with Numba: ReLU, SAXPY, naive and tiled matrix products.

Each kernel computes ONE output element per thread and starts with a bounds check, because the
grid is rounded up to whole blocks. Host wrappers (``relu``, ``saxpy``, ``matmul_naive``,
``matmul_tiled``) take NumPy arrays, launch, and return NumPy arrays, so they can be compared
with NumPy and graded as plain functions.

Importing this module imports ``numba.cuda``: under Numba's simulator only if
``NUMBA_ENABLE_CUDASIM=1`` was set BEFORE that first import (see ``edu_dl.gpu.simulator``).
"""

# Kernel bodies are device code that mypy cannot type (Numba's intrinsics have no Python stubs).
# mypy: disable-error-code="call-arg,var-annotated"
from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np
from numba import cuda, float32

from edu_dl.gpu.launch import BLOCK_2D, THREADS_1D, launch_1d, launch_2d

TILE = 16  # tile edge of the shared-memory matmul: 16 x 16 = 256 threads per block


@cuda.jit
def relu_kernel(x, out):
    """out[i] = max(x[i], 0), one thread per i."""
    i = cuda.grid(1)  # = blockIdx.x * blockDim.x + threadIdx.x, the global index
    if i < x.shape[0]:  # the last block may run past the end of x
        out[i] = x[i] if x[i] > 0 else 0.0


@cuda.jit
def saxpy_kernel(a, x, y, out):
    """out[i] = a * x[i] + y[i] ("single-precision a x plus y", BLAS level 1)."""
    i = cuda.grid(1)
    if i < out.shape[0]:
        out[i] = a * x[i] + y[i]


@cuda.jit
def matmul_naive_kernel(A, B, C):
    """C[row, col] = sum_k A[row, k] B[k, col]: one thread per output, each an independent dot."""
    col, row = cuda.grid(2)  # x along the columns: a warp reads and writes along a row
    if row < C.shape[0] and col < C.shape[1]:
        acc = float32(0.0)
        for k in range(A.shape[1]):
            acc += A[row, k] * B[k, col]
        C[row, col] = acc


@functools.cache
def matmul_tiled_kernel(tile: int = TILE) -> Any:
    """The shared-memory matmul for tile x tile blocks (compiled once per tile size).

    Each block loads a tile of A and a tile of B into fast shared memory, every thread of the block
    reads them tile times, so global memory is read n / tile times less than in the naive kernel.
    Two ``syncthreads`` per step: after loading (nobody reads a slot before it is written) and after
    using (nobody overwrites a slot that others still read).
    """

    @cuda.jit
    def matmul_tiled(A, B, C):
        sA = cuda.shared.array((tile, tile), float32)
        sB = cuda.shared.array((tile, tile), float32)
        col, row = cuda.grid(2)
        tx, ty = cuda.threadIdx.x, cuda.threadIdx.y  # tx: column in the tile, ty: row
        acc = float32(0.0)
        for t in range((A.shape[1] + tile - 1) // tile):
            # Threads past the edge still load (a zero) and still reach both syncthreads:
            # a barrier that only some threads of a block reach deadlocks. Neighbouring threads
            # (consecutive tx) load neighbouring elements of a row of A and of B: coalesced.
            k_a = t * tile + tx
            k_b = t * tile + ty
            sA[ty, tx] = A[row, k_a] if row < A.shape[0] and k_a < A.shape[1] else 0.0
            sB[ty, tx] = B[k_b, col] if k_b < B.shape[0] and col < B.shape[1] else 0.0
            cuda.syncthreads()
            for k in range(tile):
                acc += sA[ty, k] * sB[k, tx]
            cuda.syncthreads()
        if row < C.shape[0] and col < C.shape[1]:
            C[row, col] = acc

    return matmul_tiled


def _on_device(x: Any) -> bool:
    """True for GPU arrays (Numba device arrays, CuPy, torch CUDA tensors), False for NumPy."""
    if hasattr(cuda, "is_cuda_array"):
        return bool(cuda.is_cuda_array(x))
    return type(x).__name__ == "FakeCUDAArray"  # the simulator's cuda.to_device result


@cuda.jit
def _fill_nan_kernel(out):
    """out[i] = NaN: a fresh device output, so slots that no thread writes show."""
    i = cuda.grid(1)
    if i < out.shape[0]:
        out[i] = math.nan


def _vector(name: str, x: Any) -> Any:
    """x as a float32 vector (NumPy arrays are converted; device arrays pass through)."""
    if _on_device(x):
        return x
    arr = np.ascontiguousarray(x, dtype=np.float32)
    if arr.ndim != 1:
        raise ValueError(f"{name}: expected a 1-D array, got shape {arr.shape}")
    return arr


def _output(like: Any, shape: tuple[int, ...]) -> Any:
    """A float32 output filled with NaN (on the GPU for GPU inputs), so unwritten slots show."""
    if _on_device(like):
        out = cuda.device_array(shape, dtype=np.float32)
        cfg = launch_1d(math.prod(shape))
        _fill_nan_kernel[cfg.grid, cfg.block](out.reshape(math.prod(shape)))
        return out
    return np.full(shape, np.nan, dtype=np.float32)


def relu(x: Any, threads_per_block: int = THREADS_1D) -> Any:
    """max(x, 0) elementwise by ``relu_kernel``, one thread per element."""
    x = _vector("relu", x)
    out = _output(x, x.shape)
    cfg = launch_1d(x.shape[0], threads_per_block)
    relu_kernel[cfg.grid, cfg.block](x, out)
    return out


def saxpy(a: float, x: Any, y: Any, threads_per_block: int = THREADS_1D) -> Any:
    """a * x + y elementwise by ``saxpy_kernel``."""
    x, y = _vector("saxpy", x), _vector("saxpy", y)
    if x.shape != y.shape:
        raise ValueError(f"saxpy: x and y must have the same shape, got {x.shape} and {y.shape}")
    out = _output(x, x.shape)
    cfg = launch_1d(x.shape[0], threads_per_block)
    saxpy_kernel[cfg.grid, cfg.block](np.float32(a), x, y, out)
    return out


def _matrices(name: str, A: Any, B: Any) -> tuple[Any, Any]:
    """A (m, k) and B (k, n) as float32 matrices, or a clear error naming the shapes."""
    if not _on_device(A):
        A = np.ascontiguousarray(A, dtype=np.float32)
    if not _on_device(B):
        B = np.ascontiguousarray(B, dtype=np.float32)
    if len(A.shape) != 2 or len(B.shape) != 2 or A.shape[1] != B.shape[0]:
        raise ValueError(f"{name}: need A (m, k) and B (k, n), got A {tuple(A.shape)} and "
                         f"B {tuple(B.shape)}")
    return A, B


def matmul_naive(A: Any, B: Any, block: tuple[int, int] = BLOCK_2D) -> Any:
    """A @ B by ``matmul_naive_kernel``: one thread per output element."""
    A, B = _matrices("matmul_naive", A, B)
    C = _output(A, (A.shape[0], B.shape[1]))
    cfg = launch_2d(C.shape[0], C.shape[1], block)
    matmul_naive_kernel[cfg.grid, cfg.block](A, B, C)
    return C


def matmul_tiled(A: Any, B: Any, tile: int = TILE) -> Any:
    """A @ B by the shared-memory kernel, tile x tile threads per block."""
    A, B = _matrices("matmul_tiled", A, B)
    C = _output(A, (A.shape[0], B.shape[1]))
    cfg = launch_2d(C.shape[0], C.shape[1], (tile, tile))
    matmul_tiled_kernel(tile)[cfg.grid, cfg.block](A, B, C)
    return C
