"""``edu-dl bench kernels``: the course's matmul kernels against cuBLAS on the GPU.

Three ways to compute C = A @ B (n x n, float32) on a CUDA GPU: the naive Numba kernel (one
thread per output, every operand read from global memory), the tiled one (tiles of A and B
staged in shared memory, ``edu_dl.gpu.kernels``) and cuBLAS (CuPy's ``@``). GFLOP/s = 2n³ /
median seconds, and the fraction of the card's FP32 peak (SMs x lanes x 2 x clock, from Numba's
device attributes). The kernels are launched on preallocated CuPy arrays, so the time is the
kernel's, not an allocation's; every timed batch ends with a device synchronize. Each kernel's
product is checked against NumPy's first. The run happens in a fresh worker process (Numba and
CuPy each start CUDA). ``EDU_DL_BENCH_FAKE_GPU=1`` runs NumPy in each kernel's place, for tests.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from edu_dl.bench.common import format_time
from edu_dl.bench.device import Device
from edu_dl.bench.report import Benchmark, Csv, Json, Refused, Report
from edu_dl.gpu.timing import median_seconds
from edu_dl.util.args import comma_list, int_list
from edu_dl.util.tables import table
from edu_dl.util.worker import WorkerError, run_in_worker

KERNELS: dict[str, str] = {
    "naive": "naive Numba kernel (global memory)",
    "tiled": "tiled Numba kernel (16 x 16 shared-memory tiles)",
    "cublas": "cuBLAS (CuPy @)",
}
SIZES: tuple[int, ...] = (256, 512, 1024, 2048)
QUICK_SIZES: tuple[int, ...] = (64, 128)
DEFAULT_REPEATS, QUICK_REPEATS = 7, 2
BATCH_S, QUICK_BATCH_S = 0.05, 0.005


@dataclass
class KernelRow:
    kernel: str
    n: int
    seconds: float
    gflops: float
    fraction_of_peak: float | None
    max_rel_error: float


# --------------------------------------------------------------------------- in the worker


def make_kernel(kernel: str, n: int, device: Device) -> tuple[Callable[[], Any], Callable[[], Any]]:
    """(run one product, C as NumPy) for ``kernel`` at size n on ``device``."""
    rng = np.random.default_rng(n)
    a_host = rng.standard_normal((n, n), dtype=np.float32)
    b_host = rng.standard_normal((n, n), dtype=np.float32)
    if device.runs_on != "gpu":  # a fake GPU: NumPy stands in for every kernel
        out = np.empty((n, n), dtype=np.float32)
        return (lambda: np.matmul(a_host, b_host, out=out)), (lambda: out)
    from edu_dl import backend
    from edu_dl.gpu import kernels as k
    from edu_dl.gpu.launch import BLOCK_2D, launch_2d

    cp = backend.require_gpu()
    a, b = cp.asarray(a_host), cp.asarray(b_host)
    c = cp.empty((n, n), dtype=cp.float32)
    if kernel == "cublas":
        return (lambda: cp.matmul(a, b, out=c)), (lambda: backend.to_numpy(c))
    block = BLOCK_2D if kernel == "naive" else (k.TILE, k.TILE)
    cfg = launch_2d(n, n, block)
    fn = k.matmul_naive_kernel if kernel == "naive" else k.matmul_tiled_kernel(k.TILE)
    launch = fn[cfg.grid, cfg.block]
    return (lambda: launch(a, b, c)), (lambda: backend.to_numpy(c))


def measure(kernels: Sequence[str], sizes: Sequence[int], repeats: int, batch_s: float,
            device: str = "gpu", fake: bool = False) -> list[dict[str, Any]]:
    """In the worker: the peak, then one row per kernel and size (or the kernel's error)."""
    from edu_dl.gpu.timing import gpu_peak

    dev = Device(device, fake)
    peak, how = gpu_peak() if dev.runs_on == "gpu" else (None, "fake GPU: no peak")
    replies: list[dict[str, Any]] = [{"peak_gflops": peak, "peak": how}]
    for kernel in kernels:
        try:
            for n in sizes:
                run, result = make_kernel(kernel, n, dev)
                run()
                dev.synchronize()
                exact = _reference(n)
                error = float(np.abs(result() - exact).max() / np.abs(exact).max())
                seconds = median_seconds(run, repeats, batch_s, dev.synchronize)
                gflops = 2 * n**3 / seconds / 1e9
                replies.append(asdict(KernelRow(kernel, n, seconds, gflops,
                                                gflops / peak if peak else None, error)))
        except Exception as exc:  # one kernel failing (no NVVM, say) must not hide the others
            replies.append({"kernel": kernel, "error": f"{type(exc).__name__}: {exc}"})
    return replies


def _reference(n: int) -> np.ndarray:
    rng = np.random.default_rng(n)  # the seed make_kernel uses
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    return a.astype(np.float64) @ b.astype(np.float64)


# --------------------------------------------------------------------------- in the parent


@dataclass
class KernelsResult:
    rows: list[KernelRow]
    errors: dict[str, str]
    peak_gflops: float | None
    peak: str
    device: Device

    def to_json(self) -> dict[str, Any]:
        return {"rows": [asdict(r) for r in self.rows], "errors": self.errors,
                "peak_gflops": self.peak_gflops, "peak": self.peak,
                "device": self.device.kind, "fake": self.device.fake}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> KernelsResult:
        return cls([KernelRow(**r) for r in data["rows"]], data["errors"], data["peak_gflops"],
                   data["peak"], Device(data["device"], data["fake"]))


def run_kernels(kernels: Sequence[str], sizes: Sequence[int], repeats: int, batch_s: float,
                device: Device, timeout_s: float | None = None) -> KernelsResult:
    """Every kernel at every size, in one fresh worker process."""
    result = KernelsResult([], {}, None, "", device)
    try:
        replies = run_in_worker(f"{__name__}:measure", name="kernels", timeout_s=timeout_s,
                                kernels=list(kernels), sizes=list(sizes), repeats=repeats,
                                batch_s=batch_s, device=device.kind, fake=device.fake)
    except WorkerError as exc:
        result.errors["all kernels"] = str(exc)
        return result
    first, *rows = replies
    result.peak_gflops, result.peak = first["peak_gflops"], first["peak"]
    for row in rows:
        if "error" in row:
            result.errors[row["kernel"]] = row["error"]
        else:
            result.rows.append(KernelRow(**row))
    return result


def kernels_table(result: KernelsResult) -> str:
    """The printed report of ``bench kernels``: one row per kernel and n (time, GFLOP/s, fraction
    of the FP32 peak, max relative error), then each failure."""
    device = result.device
    lines = [f"bench kernels: C = A @ B, n x n float32, on the {device.label}; GFLOP/s = 2n^3 / "
             f"median time; {device.synced}.",
             f"FP32 peak: {result.peak_gflops:.0f} GFLOP/s ({result.peak})"
             if result.peak_gflops else f"FP32 peak: unknown ({result.peak or 'not measured'})",
             ""]
    rows = []
    for r in result.rows:
        frac = f"{r.fraction_of_peak:.1%}" if r.fraction_of_peak is not None else "-"
        rows.append((r.kernel, KERNELS[r.kernel], str(r.n), format_time(r.seconds),
                     f"{r.gflops:.1f}", frac, f"{r.max_rel_error:.1e}"))
    header = ("kernel", "what", "n", "time", "GFLOP/s", "of peak", "max rel. error")
    lines.append(table(header, rows, right_from=2) if rows else "(nothing measured)")
    lines += [f"FAILED {kernel}: {why}" for kernel, why in result.errors.items()]
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- the command


def kernels_flags(p: argparse.ArgumentParser) -> None:
    """``edu-dl bench kernels``'s own flags: --kernels and --sizes."""
    p.add_argument("--kernels", type=comma_list(tuple(KERNELS), "kernel"),
                   default=list(KERNELS), help=f"comma-separated (default: {','.join(KERNELS)})")
    p.add_argument("--sizes", type=int_list, default=None,
                   help=f"comma-separated n (default: {','.join(map(str, SIZES))}; with "
                   f"--quick {','.join(map(str, QUICK_SIZES))})")


def measure_kernels(args: argparse.Namespace, device: Device) -> Report:
    """Run ``edu-dl bench kernels`` on a GPU (Refused on the CPU: these kernels have no CPU
    side); status 1 when a kernel failed or nothing was measured."""
    if device.kind == "cpu":
        raise Refused("edu-dl bench kernels: these are GPU kernels, with no CPU side; `edu-dl "
                      "bench matmul --device cpu` measures the CPU's matmul.")
    sizes = args.sizes or list(QUICK_SIZES if args.quick else SIZES)
    batch_s = QUICK_BATCH_S if args.quick else BATCH_S
    result = run_kernels(args.kernels, sizes, args.repeats, batch_s, device, args.timeout)
    return Report(kernels_table(result), csv={"kernels.csv": Csv([asdict(r) for r in result.rows])},
                  json={"kernels.json": Json(result.to_json())},
                  status=1 if result.errors or not result.rows else 0)


KERNELS_BENCH = Benchmark(
    "kernels", "naive and tiled matmul kernels against cuBLAS on the GPU",
    "Time the course's naive and tiled Numba matmul kernels and cuBLAS on a CUDA GPU: GFLOP/s "
    "against n and the fraction of the card's FP32 peak.",
    measure_kernels, flags=kernels_flags, files=("kernels.csv", "kernels.json"),
    repeats=(DEFAULT_REPEATS, QUICK_REPEATS), device="gpu", timeout=True,
    device_help="gpu (default; without a GPU: one sentence and status 1); the kernels have no "
    "CPU side: `edu-dl bench matmul` measures the CPU")
