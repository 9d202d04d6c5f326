"""``edu-dl bench matmul``: GFLOP/s of an n x n float32 matmul against n, per framework and device.

FLOPs = 2n³ (n² outputs, each n multiplies and n adds); GFLOP/s = 2n³ / median seconds / 1e9.
Targets are NumPy, PyTorch and TensorFlow on the CPU, and CuPy, PyTorch CUDA and TensorFlow GPU
where a GPU exists (``--device gpu`` insists on them); the CPU and GPU runs are one code path
(``xp`` / ``device``), and every timed batch ends with the device synchronized. Each target runs in
a worker process of its own (``worker.Worker``), one after the other (BLAS and OpenMP pools fight
when they share cores). The report gives the fraction of the CPU's peak reached, the size where a
GPU starts to win, and a roofline: arithmetic intensity 2n³ / (3 * 4n²) FLOPs per byte against
GFLOP/s, under the bandwidth slope and the peak roof.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from edu_dl.bench.common import load_average, progress
from edu_dl.bench.device import Device
from edu_dl.bench.report import Benchmark, Csv, Json, Report
from edu_dl.gpu.timing import batch_seconds
from edu_dl.machine import hardware as hw
from edu_dl.machine import probes as gp
from edu_dl.machine.doctor import BANDWIDTH_INPUTS, PEAK_INPUTS, add_machine_flags
from edu_dl.machine.hardware import Fact, machine_label
from edu_dl.util.args import comma_list, int_list, positive_int
from edu_dl.util.tables import table
from edu_dl.util.worker import DEFAULT_TIMEOUT_S, Worker, WorkerError

# target -> (library, device): the GPU targets run the CPU targets' code on device 'gpu'.
TARGETS: dict[str, tuple[str, str]] = {
    "numpy": ("numpy", "cpu"),
    "torch": ("torch", "cpu"),
    "tensorflow": ("tensorflow", "cpu"),
    "cupy": ("numpy", "gpu"),
    "torch_cuda": ("torch", "gpu"),
    "tf_gpu": ("tensorflow", "gpu"),
}
TITLES: dict[str, str] = {
    "numpy": "NumPy",
    "torch": "PyTorch CPU",
    "tensorflow": "TensorFlow CPU",
    "cupy": "CuPy",
    "torch_cuda": "PyTorch CUDA",
    "tf_gpu": "TensorFlow GPU",
}
CPU_TARGETS = tuple(t for t, (_, dev) in TARGETS.items() if dev == "cpu")
GPU_TARGETS = tuple(t for t, (_, dev) in TARGETS.items() if dev == "gpu")
SIZES: tuple[int, ...] = (16, 32, 64, 128, 256, 512, 1024, 2048)
QUICK_SIZES: tuple[int, ...] = (16, 64, 256)
DEFAULT_REPEATS, QUICK_REPEATS = 7, 3
# One timed batch of calls lasts at least this long: a 16x16 matmul takes about a microsecond,
# far below what one timer read can resolve.
BATCH_S, QUICK_BATCH_S = 0.05, 0.005
MAX_CALLS = 100_000
WORKER_TIMEOUT_S = DEFAULT_TIMEOUT_S
ITEMSIZE = 4  # float32
SYNCED = ("GPU targets: every timed batch ends with the device synchronized (CuPy's stream, "
          "torch.cuda.synchronize, TensorFlow's sync_devices); CPU calls return when done")


# --------------------------------------------------------------------------- in the worker


def make_matmul(library: str, device: str, n: int) -> tuple[Callable[[], Any], Callable[[], None]]:
    """(one n x n float32 matmul, wait for the device) for ``library`` on ``device``."""
    rng = np.random.default_rng(n)
    a_host = rng.standard_normal((n, n), dtype=np.float32)
    b_host = rng.standard_normal((n, n), dtype=np.float32)
    if library == "numpy":
        from edu_dl import backend

        a, b = backend.to_device(a_host, device), backend.to_device(b_host, device)
        return (lambda: a @ b), backend.synchronize
    if library == "torch":
        import torch

        if device == "gpu" and not torch.cuda.is_available():
            raise RuntimeError(f"PyTorch {torch.__version__} sees no CUDA GPU")
        dev = torch.device("cuda" if device == "gpu" else "cpu")
        ta, tb = torch.from_numpy(a_host).to(dev), torch.from_numpy(b_host).to(dev)
        sync = torch.cuda.synchronize if device == "gpu" else (lambda: None)
        return (lambda: ta @ tb), sync
    if library == "tensorflow":
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
        import tensorflow as tf

        if device == "gpu" and not tf.config.list_physical_devices("GPU"):
            raise RuntimeError(f"TensorFlow {tf.__version__} sees no GPU")
        name = "/GPU:0" if device == "gpu" else "/CPU:0"
        with tf.device(name):
            xa, xb = tf.constant(a_host), tf.constant(b_host)

        def run() -> Any:
            with tf.device(name):
                return tf.linalg.matmul(xa, xb)

        # Eager CPU ops return when done; GPU ops are queued and need a sync.
        sync = tf.test.experimental.sync_devices if device == "gpu" else (lambda: None)
        return run, sync
    raise ValueError(f"make_matmul: unknown library {library!r} (choose numpy, torch, tensorflow)")


def time_matmul(
    run: Callable[[], Any], sync: Callable[[], None], repeats: int, batch_s: float
) -> list[float]:
    """Seconds per call, one figure per timed batch; each batch ends with a device sync."""
    return batch_seconds(run, repeats, batch_s, sync, MAX_CALLS)


def library_version(library: str) -> str:
    """The ``__version__`` of ``library`` (numpy, torch or tensorflow), importing it."""
    module = {"numpy": np}.get(library) or __import__(library)
    return str(module.__version__)


def measure(target: str, sizes: Sequence[int], repeats: int, batch_s: float,
            threads: int | None = None) -> Iterator[dict[str, Any]]:
    """In the worker process: one reply per size, as each is measured."""
    library, device = TARGETS[target]
    if threads and library == "tensorflow":  # TF ignores OMP_NUM_THREADS
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
        import tensorflow as tf

        tf.config.threading.set_intra_op_parallelism_threads(threads)
        tf.config.threading.set_inter_op_parallelism_threads(threads)
    for n in sizes:
        run, sync = make_matmul(library, device, n)
        times = time_matmul(run, sync, repeats, batch_s)
        yield {"n": n, "seconds": statistics.median(times), "times": times,
               "version": library_version(library)}


# --------------------------------------------------------------------------- in the parent


@dataclass(frozen=True)
class Row:
    """One target at one size: median seconds per matmul and what follows from it."""

    target: str
    title: str
    device: str
    version: str
    n: int
    flops: int
    seconds: float
    gflops: float
    intensity: float
    repeats: int


def make_row(target: str, n: int, seconds: float, repeats: int, version: str = "") -> Row:
    """A Row with FLOPs = 2n³, GFLOP/s = FLOPs / seconds / 1e9, intensity = 2n³ / (3 * 4n²)."""
    if not (seconds > 0 and math.isfinite(seconds)):
        raise ValueError(f"bench matmul: {target} at n={n} took {seconds} s, not a positive time")
    flops = hw.matmul_flops(n)
    return Row(target, TITLES[target], TARGETS[target][1], version, n, flops, seconds,
               flops / seconds / 1e9, hw.matmul_intensity(n, ITEMSIZE), repeats)


def run_target(
    target: str,
    sizes: Sequence[int],
    repeats: int,
    batch_s: float,
    timeout: float,
    threads: int | None = None,
) -> Iterator[dict[str, Any]]:
    """Run one target's worker process and yield its replies as they come; then any error."""
    got = 0
    with Worker(target, threads=threads) as worker:
        worker.send(f"{__name__}:measure", target=target, sizes=list(sizes), repeats=repeats,
                    batch_s=batch_s, threads=threads)
        try:
            for reply in worker.stream(timeout):
                got += 1
                yield reply
        except WorkerError as exc:
            if exc.kind == "error":  # a missing library or device: its own message says it
                yield {"error": str(exc).split(" worker: ", 1)[-1]}
            else:
                yield {"error": f"worker stopped after {got} of {len(sizes)} sizes: {exc}"}


@dataclass
class MatmulResult:
    """Everything one ``bench matmul`` run measured, with the machine it ran on."""

    machine: str
    rows: list[Row]
    failed: dict[str, str]
    left_out: dict[str, str]
    peak: dict[str, Any]
    bandwidth: dict[str, Any]
    checks: list[str] = field(default_factory=list)
    load: tuple[float, float] | None = None  # 1-minute load average before and after
    threads: int | None = None  # the cap on each library's thread pool, if any

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> MatmulResult:
        """The result back from its matmul.json."""
        load = data.get("load_average")
        return cls(data["machine"], [Row(**r) for r in data["rows"]], data["failed"],
                   data["left_out"], data["peak"], data["bandwidth"], data["checks"],
                   tuple(load) if load else None, data.get("threads"))

    def gflops(self, target: str, n: int) -> float | None:
        return next((r.gflops for r in self.rows if r.target == target and r.n == n), None)

    def targets(self) -> list[str]:
        return list(dict.fromkeys(r.target for r in self.rows))

    def sizes(self) -> list[int]:
        return sorted({r.n for r in self.rows})


def crossover(rows: Sequence[Row], gpu_target: str) -> int | None:
    """Smallest n from which the GPU target beats the best CPU target at every larger size."""
    sizes = sorted({r.n for r in rows if r.target == gpu_target})
    best_cpu = {n: max((r.gflops for r in rows if r.n == n and r.device == "cpu"), default=None)
                for n in sizes}
    gpu = {r.n: r.gflops for r in rows if r.target == gpu_target}
    wins_from: int | None = None
    for n in reversed(sizes):
        cpu = best_cpu[n]
        if cpu is None or gpu[n] <= cpu:
            break
        wins_from = n
    return wins_from


def roof(peak: float | None, bandwidth: float | None, intensity: float) -> float | None:
    """Attainable GFLOP/s at an intensity = min(peak, bandwidth GB/s * FLOPs per byte)."""
    bounds = [b for b in (peak, None if bandwidth is None else bandwidth * intensity) if b]
    return min(bounds) if bounds else None


def reference_peak(peak: dict[str, Any]) -> tuple[float | None, str]:
    """(GFLOP/s, label) the fractions refer to: the theoretical peak, else the assumption."""
    for key, label in (("theoretical", "theoretical peak"), ("assumed", "ASSUMED peak")):
        if peak[key]["value"] is not None:
            return float(peak[key]["value"]), label
    return None, "no peak known: " + peak["theoretical"]["reason"]


def machine_facts(args: argparse.Namespace, best_cpu: float | None, quick: bool) -> tuple[
    dict[str, Any], dict[str, Any], list[str], str
]:
    """(peak facts, bandwidth facts, checks, machine label) for the roofline."""
    cpu = hw.read_cpu()
    # With --threads N only N cores can work, so the peak counts N cores.
    theory, assumed = hw.theoretical_peak(cpu, args.fma_units, args.clock_mhz, args.threads)
    measured = (Fact(best_cpu, "GFLOP/s", "best CPU matmul of this run")
                if best_cpu else hw.unknown("no CPU target measured"))
    checks = []
    theory, verdict = hw.check_measured(theory, measured, "theoretical peak", PEAK_INPUTS)
    checks.append(verdict)
    assumed, verdict = hw.check_measured(
        assumed, measured, "assumed peak", f"{hw.ASSUMED_FMA_UNITS} FMA units is a wrong guess here"
    )
    checks.append(verdict)
    copy = hw.measure_bandwidth(64 * 2**20 if quick else 256 * 2**20, 3 if quick else 5)
    bw_theory = hw.theoretical_bandwidth(args.memory_mts, args.channels, args.bus_bytes)
    bw_theory, verdict = hw.check_measured(bw_theory, copy, "memory bandwidth", BANDWIDTH_INPUTS)
    checks.append(verdict)
    peak = {"theoretical": theory.as_dict(), "assumed": assumed.as_dict(),
            "measured": measured.as_dict()}
    bandwidth = {"theoretical": bw_theory.as_dict(), "measured_copy": copy.as_dict()}
    return peak, bandwidth, checks, machine_label(cpu)


def run_matmul(args: argparse.Namespace) -> MatmulResult:
    """Run every target, one process at a time, with a progress bar on stderr."""
    repeats = args.repeats or (QUICK_REPEATS if args.quick else DEFAULT_REPEATS)
    batch_s = QUICK_BATCH_S if args.quick else BATCH_S
    rows: list[Row] = []
    failed: dict[str, str] = {}
    load_before = load_average()
    total = len(args.targets) * len(args.sizes)
    with progress(total, "bench matmul", not getattr(args, "no_progress", False)) as bar:
        for target in args.targets:
            bar.set_postfix_str(TITLES[target])
            done = 0
            replies = run_target(target, args.sizes, repeats, batch_s, args.timeout, args.threads)
            for reply in replies:
                if "error" in reply:
                    failed[target] = reply["error"]
                    break
                rows.append(make_row(target, reply["n"], reply["seconds"], repeats,
                                     reply.get("version", "")))
                done += 1
                bar.update(1)
            bar.update(len(args.sizes) - done)
    best_cpu = max((r.gflops for r in rows if r.device == "cpu"), default=None)
    peak, bandwidth, checks, machine = machine_facts(args, best_cpu, args.quick)
    load_after = load_average()
    load = (load_before, load_after) if math.isfinite(load_before + load_after) else None
    return MatmulResult(machine, rows, failed, args.left_out, peak, bandwidth, checks, load,
                        args.threads)


def sweep(
    sizes: Sequence[int] = SIZES,
    targets: Sequence[str] = ("numpy", "torch"),
    *,
    quick: bool = False,
    threads: int | None = None,
    repeats: int | None = None,
    timeout: float = WORKER_TIMEOUT_S,
    show_progress: bool = True,
) -> MatmulResult:
    """``edu-dl bench matmul`` from Python: the same run as the command, with keywords instead of
    flags (a notebook calls this; the machine facts the CPU does not reveal stay unknown)."""
    unknown = [t for t in targets if t not in TARGETS]
    if unknown:
        raise ValueError(f"sweep: unknown targets {unknown}; choose from {list(TARGETS)}")
    args = argparse.Namespace(
        sizes=sorted(set(sizes)), targets=list(targets), left_out={}, quick=quick,
        threads=threads, repeats=repeats, timeout=timeout, no_progress=not show_progress,
        fma_units=None, clock_mhz=None, memory_mts=None, channels=None, bus_bytes=8)
    return run_matmul(args)


# --------------------------------------------------------------------------- report


def summary(result: MatmulResult) -> dict[str, Any]:
    """Per target: best GFLOP/s, at which n, fraction of the reference peak; GPU crossovers."""
    ref, ref_label = reference_peak(result.peak)
    best = {}
    for target in result.targets():
        top = max((r for r in result.rows if r.target == target), key=lambda r: r.gflops)
        fraction = top.gflops / ref if ref and top.device == "cpu" else None
        best[target] = {"gflops": top.gflops, "n": top.n, "fraction_of_peak": fraction}
    gpus = [t for t in result.targets() if TARGETS[t][1] == "gpu"]
    return {"reference_peak_gflops": ref, "reference_peak": ref_label, "best": best,
            "crossover_n": {t: crossover(result.rows, t) for t in gpus}}


def render(result: MatmulResult) -> str:
    """The terminal report: GFLOP/s per size and target, then peaks, fractions and crossovers."""
    targets, info = result.targets(), summary(result)
    rows = [[str(n)] + [_num(result.gflops(t, n)) for t in targets] for n in result.sizes()]
    lines = [f"bench matmul: float32 n x n, GFLOP/s = 2n^3 / median time  ({result.machine})", ""]
    lines += [table(["n", *[TITLES[t] for t in targets]], rows), ""]
    ref, label = info["reference_peak_gflops"], info["reference_peak"]
    lines.append(f"peak used for fractions: {_num(ref)} GFLOP/s ({label})" if ref else label)
    for target, b in info["best"].items():
        frac = f", {b['fraction_of_peak']:.0%} of the {label}" if b["fraction_of_peak"] else ""
        lines.append(f"  best {TITLES[target]}: {b['gflops']:.1f} GFLOP/s at n={b['n']}{frac}")
    bw = result.bandwidth["measured_copy"]["value"]
    if bw and ref:
        lines.append(f"ridge point: {ref / bw:.1f} FLOPs/byte (peak / measured copy bandwidth "
                     f"{bw:.1f} GB/s); a float32 n x n matmul has n/6 FLOPs/byte")
    for target, n in info["crossover_n"].items():
        lines.append(f"{TITLES[target]} beats every CPU target from n = {n}" if n
                     else f"{TITLES[target]} never beats the best CPU target at the sizes run")
    if not info["crossover_n"]:
        lines.append("GPU crossover: not measured (no GPU target ran)")
    lines.append(f"timing: {SYNCED}")
    lines += [f"checks: {c}" for c in result.checks]
    cores = os.cpu_count() or 1
    if result.load and max(result.load) > cores:
        lines.append(f"warning: the machine was busy (1-minute load average {result.load[0]:.1f} "
                     f"before, {result.load[1]:.1f} after, on {cores} CPUs): multi-threaded BLAS "
                     + (f"suffers most; each library ran on {result.threads} thread(s)"
                        if result.threads else "suffers most; try --threads 1"))
    lines += [f"left out {TITLES[t]}: {why}" for t, why in result.left_out.items()]
    lines += [f"FAILED {TITLES[t]}: {why}" for t, why in result.failed.items()]
    return "\n".join(lines) + "\n"


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:.3g}" if x < 10 else f"{x:.1f}"


def outputs(result: MatmulResult) -> Report:
    """The report, matmul.csv, matmul.json, matmul_gflops.png and matmul_roofline.png."""
    ref, _ = reference_peak(result.peak)
    rows = [{**asdict(r), "fraction_of_peak": r.gflops / ref if ref and r.device == "cpu" else ""}
            for r in result.rows]
    data = {"machine": result.machine, "rows": [asdict(r) for r in result.rows],
            "summary": summary(result), "peak": result.peak, "bandwidth": result.bandwidth,
            "checks": result.checks, "failed": result.failed, "left_out": result.left_out,
            "load_average": result.load, "threads": result.threads}
    return Report(render(result),
                  csv={"matmul.csv": Csv(rows, [*Row.__dataclass_fields__, "fraction_of_peak"])},
                  json={"matmul.json": Json(data, indent=2)},
                  plots={"matmul_gflops.png": lambda path: plot_gflops(result, path),
                         "matmul_roofline.png": lambda path: plot_roofline(result, path)},
                  status=1 if result.failed or not result.rows else 0)


def plot_gflops(result: MatmulResult, path: Path) -> Path:
    """GFLOP/s against n, one line per target (log-log)."""
    from matplotlib.figure import Figure  # no pyplot: no global backend, Agg by default

    fig = Figure(figsize=(7, 4.5))
    ax = fig.subplots()
    for t in result.targets():
        pts = [(r.n, r.gflops) for r in result.rows if r.target == t]
        ax.plot(*zip(*pts), marker="o", linestyle="--" if TARGETS[t][1] == "gpu" else "-",
                label=TITLES[t])
    ref, label = reference_peak(result.peak)
    if ref:
        ax.axhline(ref, color="black", linewidth=0.8, linestyle=":",
                   label=f"{label} {ref:.0f} GFLOP/s")
    ax.set(xscale="log", yscale="log", xlabel="n (n x n float32 matmul)", ylabel="GFLOP/s",
           title=f"Matmul speed against size\n{result.machine}")
    ax.set_xscale("log", base=2)
    ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return path


def plot_roofline(result: MatmulResult, path: Path) -> Path:
    """Roofline: GFLOP/s against FLOPs per byte, under the bandwidth slope and peak roofs."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7, 4.5))
    ax = fig.subplots()
    cpu_rows = [r for r in result.rows if r.device == "cpu"]
    xs = [r.intensity for r in result.rows] or [1.0]
    grid = np.geomspace(min(xs) / 2, max(xs) * 2, 200)
    bw_measured = result.bandwidth["measured_copy"]["value"]
    bw_theory = result.bandwidth["theoretical"]["value"]
    ref, label = reference_peak(result.peak)
    measured_peak = max((r.gflops for r in cpu_rows), default=None)
    for peak, bw, style, name in (
        (ref, bw_theory or bw_measured, "-", f"{label} / " + ("theoretical" if bw_theory
                                                              else "measured") + " bandwidth"),
        (measured_peak, bw_measured, "--", "measured peak / measured copy bandwidth"),
    ):
        ys = [roof(peak, bw, x) for x in grid]
        if peak and bw:  # both roofs known: draw the roofline
            ax.plot(grid, [float(y or 0.0) for y in ys], color="black", linestyle=style,
                    linewidth=1, label=name)
    for t in result.targets():
        pts = [(r.intensity, r.gflops) for r in result.rows if r.target == t]
        ax.plot(*zip(*pts), marker="o", linestyle="none", label=TITLES[t])
    ax.set(xscale="log", yscale="log", xlabel="arithmetic intensity (FLOPs/byte) = n/6",
           ylabel="GFLOP/s", title=f"Roofline, float32 matmul (CPU roofs)\n{result.machine}")
    ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return path


# --------------------------------------------------------------------------- the command


def matmul_flags(parser: argparse.ArgumentParser) -> None:
    """``edu-dl bench matmul``'s own flags: --sizes, --frameworks, --threads and the machine
    flags it shares with ``edu-dl doctor``."""
    parser.add_argument("--sizes", type=int_list, default=None,
                        help=f"comma-separated n (default: {','.join(map(str, SIZES))}; "
                        f"with --quick {','.join(map(str, QUICK_SIZES))})")
    parser.add_argument("--frameworks", type=comma_list(tuple(TARGETS), "framework"),
                        default=None,
                        help=f"comma-separated, from {','.join(TARGETS)} (default: the CPU ones, "
                        "and the GPU ones when an NVIDIA driver is present)")
    parser.add_argument("--threads", type=positive_int, metavar="N",
                        help="cap each library's thread pool at N (default: its own choice); "
                        "1 keeps a busy shared machine from wrecking multi-threaded BLAS")
    add_machine_flags(parser)


def measure_matmul(args: argparse.Namespace, device: Device) -> Report:
    """Run ``edu-dl bench matmul`` on --frameworks, else the CPU targets, with the GPU ones too
    under --device gpu or where an NVIDIA driver is present; the report, matmul.csv, matmul.json
    and two plots."""
    args.sizes = args.sizes or list(QUICK_SIZES if args.quick else SIZES)
    args.left_out = {}
    if args.frameworks is not None:
        args.targets = args.frameworks
    elif args.device == "cpu":
        args.targets = list(CPU_TARGETS)
    elif args.device == "gpu" or gp.nvidia_driver()["present"]:
        args.targets = list(CPU_TARGETS) + list(GPU_TARGETS)  # the CPU ones for the crossover
    else:
        args.targets = list(CPU_TARGETS)
        args.left_out = {t: "no NVIDIA GPU here (no driver)" for t in GPU_TARGETS}
    result = run_matmul(args)
    if result.failed:
        print(f"bench matmul: {', '.join(result.failed)} failed (see below)", file=sys.stderr)
    return outputs(result)


MATMUL = Benchmark(
    "matmul", "matmul GFLOP/s against size per framework, GPU crossover, roofline",
    "Time an n x n float32 matmul (2n^3 FLOPs) for each size and framework, each framework in "
    "its own process; report GFLOP/s, the fraction of the CPU's peak, where a GPU starts to "
    "win, and a roofline.",
    measure_matmul, flags=matmul_flags, repeats=(DEFAULT_REPEATS, QUICK_REPEATS),
    files=("matmul.csv", "matmul.json", "matmul_gflops.png", "matmul_roofline.png"),
    device=None, timeout=True, quick="few sizes, short batches",
    device_help="cpu: the CPU targets only; gpu: the GPU targets too, or one sentence and status "
    "1 without a GPU (default: the GPU targets when a driver is present)")
