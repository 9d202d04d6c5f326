"""Timing kernels honestly: synchronize the device, then count FLOPs against the card's peak.

A kernel launch returns at once and the GPU works on; a timer read right after measures the
launch, not the work. ``synchronize`` waits for every library this process uses (Numba, CuPy,
PyTorch), so the median of ``time_it`` is the time of the work.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

# FP32 lanes per streaming multiprocessor by compute capability (CUDA C Programming Guide,
# "Arithmetic Instructions" throughput table); a major version alone is the fallback.
FP32_LANES_PER_SM: dict[tuple[int, int] | int, int] = {
    (6, 0): 64, (7, 0): 64, (7, 2): 64, (7, 5): 64, (8, 0): 64,
    3: 192, 5: 128, 6: 128, 7: 64, 8: 128, 9: 128, 10: 128, 12: 128,
}


def synchronize() -> None:
    """Wait for queued GPU work in Numba, CuPy and PyTorch (no-op without a GPU)."""
    cuda = sys.modules.get("numba.cuda")
    if cuda is not None:
        try:
            if cuda.is_available():
                cuda.synchronize()
        except Exception:  # the simulator or a broken driver: nothing queued to wait for
            pass
    from edu_dl import backend

    backend.synchronize()
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        torch.cuda.synchronize()


def time_it(fn: Callable[[], Any], repeats: int = 5, warmup: int = 1,
            sync: Callable[[], None] = synchronize) -> float:
    """Median seconds of ``fn()`` over ``repeats`` runs, each synchronized before and after."""
    if repeats < 1:
        raise ValueError(f"time_it: repeats must be >= 1, got {repeats}")
    for _ in range(warmup):  # the first launch compiles the kernel
        fn()
    sync()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def matmul_flops(m: int, n: int, k: int) -> int:
    """FLOPs of an (m, k) @ (k, n) product = 2mnk (one multiply and one add per term)."""
    return 2 * m * n * k


def gflops(flops: float, seconds: float) -> float:
    """GFLOP/s = FLOPs / seconds / 1e9."""
    if seconds <= 0:
        raise ValueError(f"gflops: seconds must be > 0, got {seconds}")
    return flops / seconds / 1e9


def fp32_lanes(major: int, minor: int) -> int | None:
    """FP32 lanes per SM for compute capability major.minor, or None if unknown."""
    return FP32_LANES_PER_SM.get((major, minor), FP32_LANES_PER_SM.get(major))


def peak_fp32_gflops(sm_count: int, clock_khz: float, major: int, minor: int) -> float | None:
    """Peak = SMs x FP32 lanes per SM x 2 (a fused multiply-add is 2 FLOPs) x clock."""
    lanes = fp32_lanes(major, minor)
    if lanes is None:
        return None
    return sm_count * lanes * 2 * clock_khz * 1e3 / 1e9


def gpu_peak() -> tuple[float | None, str]:
    """(peak FP32 GFLOP/s of the current Numba CUDA device, how it was computed) or (None, why)."""
    try:
        from numba import cuda

        if not cuda.is_available():
            return None, "no CUDA GPU"
        dev = cuda.get_current_device()
        sms, clock_khz = int(dev.MULTIPROCESSOR_COUNT), float(dev.CLOCK_RATE)
        major, minor = dev.compute_capability
    except Exception as exc:  # a driver without these attributes: say so, do not guess
        return None, f"peak unknown ({type(exc).__name__}: {exc})"
    peak = peak_fp32_gflops(sms, clock_khz, major, minor)
    if peak is None:
        return None, f"peak unknown for compute capability {major}.{minor}"
    return peak, (f"{sms} SMs x {fp32_lanes(major, minor)} FP32 lanes x 2 x "
                  f"{clock_khz / 1e6:.2f} GHz (boost clock)")


def fraction_of_peak(measured_gflops: float, peak_gflops: float | None) -> float | None:
    """measured / peak, or None when the peak is unknown."""
    return None if not peak_gflops else measured_gflops / peak_gflops
