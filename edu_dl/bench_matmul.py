"""``edu-dl bench matmul``: GFLOP/s of an n x n float32 matmul against n, per framework and device.

FLOPs = 2n³ (n² outputs, each n multiplies and n adds); GFLOP/s = 2n³ / median seconds / 1e9.
Targets are NumPy, PyTorch and TensorFlow on the CPU, and CuPy, PyTorch CUDA and TensorFlow GPU
where a GPU exists; the CPU and GPU runs are one code path (``xp`` / ``device``). Each target runs
in its own process, one after the other (BLAS and OpenMP pools fight when they share cores). The
report gives the fraction of the CPU's peak reached, the size where a GPU starts to win, and a
roofline: arithmetic intensity 2n³ / (3 * 4n²) FLOPs per byte against GFLOP/s, under the
bandwidth slope and the peak roof.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from . import gpu_probes as gp
from . import hardware as hw
from .hardware import Fact

Subparsers = Any  # argparse's _SubParsersAction is private

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
WORKER_TIMEOUT_S = 600.0
MARK = "EDU_DL_MATMUL "
ITEMSIZE = 4  # float32


# --------------------------------------------------------------------------- in the worker


def make_matmul(library: str, device: str, n: int) -> tuple[Callable[[], Any], Callable[[], None]]:
    """(one n x n float32 matmul, wait for the device) for ``library`` on ``device``."""
    rng = np.random.default_rng(n)
    a_host = rng.standard_normal((n, n), dtype=np.float32)
    b_host = rng.standard_normal((n, n), dtype=np.float32)
    if library == "numpy":
        from . import backend

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
    run()
    sync()  # warm-up: thread pools, kernels, caches
    start = time.perf_counter()
    run()
    sync()
    one = time.perf_counter() - start
    calls = max(1, min(MAX_CALLS, int(batch_s / max(one, 1e-9))))
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            run()
        sync()
        times.append((time.perf_counter() - start) / calls)
    return times


def library_version(library: str) -> str:
    module = {"numpy": np}.get(library) or __import__(library)
    return str(module.__version__)


def thread_env(threads: int | None) -> dict[str, str]:
    """Environment capping OpenBLAS, MKL and OpenMP (NumPy, PyTorch) pools at ``threads``."""
    names = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
    return dict.fromkeys(names, str(threads)) if threads else {}


def worker_main(
    target: str, sizes: Sequence[int], repeats: int, batch_s: float, threads: int | None = None
) -> int:
    """In the worker process: one marked JSON line per size, or one with an 'error'."""
    # The protocol gets a private copy of stdout: whatever a library prints goes to stderr.
    protocol = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    library, device = TARGETS[target]
    try:
        if threads and library == "tensorflow":  # TF ignores OMP_NUM_THREADS
            os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
            import tensorflow as tf

            tf.config.threading.set_intra_op_parallelism_threads(threads)
            tf.config.threading.set_inter_op_parallelism_threads(threads)
        for n in sizes:
            run, sync = make_matmul(library, device, n)
            times = time_matmul(run, sync, repeats, batch_s)
            seconds = statistics.median(times)
            reply = {"n": n, "seconds": seconds, "times": times,
                     "version": library_version(library)}
            protocol.write(MARK + json.dumps(reply) + "\n")
    except Exception as exc:  # a missing library or device: reported by the parent
        protocol.write(MARK + json.dumps({"error": f"{type(exc).__name__}: {exc}"}) + "\n")
    return 0


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
    """Run one target's worker process and yield its replies as they come."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", **thread_env(threads))
    root = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    cmd = [sys.executable, "-m", "edu_dl.bench_matmul", "--worker", target,
           "--sizes", ",".join(map(str, sizes)), "--repeats", str(repeats),
           "--batch-s", str(batch_s), *(["--threads", str(threads)] if threads else [])]
    # stderr to a file, not a pipe: a chatty library can never block on a full pipe.
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True, env=env)
        watchdog = threading.Timer(timeout, proc.kill)
        watchdog.start()
        got, errored = 0, False
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                if not line.startswith(MARK):
                    continue
                reply = json.loads(line[len(MARK) :])
                errored = "error" in reply
                got += 0 if errored else 1
                yield reply
                if errored:
                    return
        finally:
            watchdog.cancel()
            proc.kill()
            proc.wait()
        if got < len(sizes):  # it died or was killed without saying why
            err.seek(0)
            tail = (err.read().decode(errors="replace").strip().splitlines() or ["no output"])[-1]
            yield {"error": f"worker stopped after {got} of {len(sizes)} sizes (exit status "
                   f"{proc.returncode}; killed after {timeout:g} s if negative): {tail}"}


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
    from .doctor import BANDWIDTH_INPUTS, PEAK_INPUTS, machine_label

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
    from tqdm import tqdm

    repeats = args.repeats or (QUICK_REPEATS if args.quick else DEFAULT_REPEATS)
    batch_s = QUICK_BATCH_S if args.quick else BATCH_S
    rows: list[Row] = []
    failed: dict[str, str] = {}
    load_before = _load_average()
    with tqdm(total=len(args.targets) * len(args.sizes), desc="bench matmul", unit="size",
              file=sys.stderr, disable=None) as bar:
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
    load_after = _load_average()
    load = (load_before, load_after) if load_before is not None and load_after else None
    return MatmulResult(machine, rows, failed, args.left_out, peak, bandwidth, checks, load)


def _load_average() -> float | None:
    try:
        return os.getloadavg()[0]
    except (OSError, AttributeError):  # not on Windows
        return None


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
    from .doctor import table

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
    lines += [f"checks: {c}" for c in result.checks]
    cores = os.cpu_count() or 1
    if result.load and max(result.load) > cores:
        lines.append(f"warning: the machine was busy (1-minute load average {result.load[0]:.1f} "
                     f"before, {result.load[1]:.1f} after, on {cores} CPUs): multi-threaded BLAS "
                     "suffers most; try --threads 1")
    lines += [f"left out {TITLES[t]}: {why}" for t, why in result.left_out.items()]
    lines += [f"FAILED {TITLES[t]}: {why}" for t, why in result.failed.items()]
    return "\n".join(lines) + "\n"


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:.3g}" if x < 10 else f"{x:.1f}"


def write_outputs(result: MatmulResult, out: Path) -> list[Path]:
    """matmul.csv, matmul.json, matmul_gflops.png and matmul_roofline.png under ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    csv_path = out / "matmul.csv"
    ref, _ = reference_peak(result.peak)
    with csv_path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow([*Row.__dataclass_fields__, "fraction_of_peak"])
        for r in result.rows:
            frac = r.gflops / ref if ref and r.device == "cpu" else ""
            writer.writerow([*asdict(r).values(), frac])
    json_path = out / "matmul.json"
    data = {"machine": result.machine, "rows": [asdict(r) for r in result.rows],
            "summary": summary(result), "peak": result.peak, "bandwidth": result.bandwidth,
            "checks": result.checks, "failed": result.failed, "left_out": result.left_out,
            "load_average": result.load}
    json_path.write_text(json.dumps(data, indent=2))
    return [csv_path, json_path, plot_gflops(result, out / "matmul_gflops.png"),
            plot_roofline(result, out / "matmul_roofline.png")]


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


def _int_list(text: str) -> list[int]:
    try:
        sizes = [int(t) for t in text.split(",") if t.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated whole numbers, got {text!r}"
        ) from None
    if not sizes or min(sizes) < 1:
        raise argparse.ArgumentTypeError(f"sizes must be positive whole numbers, got {text!r}")
    return sorted(set(sizes))


def _target_list(text: str) -> list[str]:
    items = list(dict.fromkeys(t.strip() for t in text.split(",") if t.strip()))
    bad = [t for t in items if t not in TARGETS]
    if bad or not items:
        raise argparse.ArgumentTypeError(
            f"unknown framework(s) {', '.join(map(repr, bad)) or '(none given)'}; "
            f"choose from {','.join(TARGETS)}"
        )
    return items


def add_bench_matmul(kinds: Subparsers) -> None:
    from .doctor import add_machine_flags, positive_number

    parser = kinds.add_parser(
        "matmul",
        help="matmul GFLOP/s against size per framework, GPU crossover, roofline",
        description="Time an n x n float32 matmul (2n^3 FLOPs) for each size and framework, each "
        "framework in its own process; report GFLOP/s, the fraction of the CPU's peak, where a "
        "GPU starts to win, and a roofline.",
    )
    parser.add_argument("--sizes", type=_int_list, default=None,
                        help=f"comma-separated n (default: {','.join(map(str, SIZES))}; "
                        f"with --quick {','.join(map(str, QUICK_SIZES))})")
    parser.add_argument("--frameworks", type=_target_list, default=None,
                        help=f"comma-separated, from {','.join(TARGETS)} (default: the CPU ones, "
                        "and the GPU ones when an NVIDIA driver is present)")
    parser.add_argument("--repeats", type=positive_number(int), default=None,
                        help=f"timed batches; the median is reported (default: {DEFAULT_REPEATS}, "
                        f"with --quick {QUICK_REPEATS})")
    parser.add_argument("--quick", action="store_true", help="few sizes, short batches")
    parser.add_argument("--out", type=Path, metavar="DIR",
                        help="write matmul.csv, matmul.json and PNG plots here")
    parser.add_argument("--timeout", type=positive_number(float), default=WORKER_TIMEOUT_S,
                        metavar="S", help="seconds one framework's process may take")
    parser.add_argument("--threads", type=positive_number(int), metavar="N",
                        help="cap each library's thread pool at N (default: its own choice); "
                        "1 keeps a busy shared machine from wrecking multi-threaded BLAS")
    add_machine_flags(parser)
    parser.set_defaults(handler=run_bench_matmul)


def run_bench_matmul(args: argparse.Namespace) -> int:
    args.sizes = args.sizes or list(QUICK_SIZES if args.quick else SIZES)
    args.left_out = {}
    if args.frameworks is None:
        args.targets = list(CPU_TARGETS)
        if gp.nvidia_driver()["present"]:
            args.targets += list(GPU_TARGETS)
        else:
            args.left_out = {t: "no NVIDIA GPU here (no driver)" for t in GPU_TARGETS}
    else:
        args.targets = args.frameworks
    result = run_matmul(args)
    sys.stdout.write(render(result))
    if args.out is not None:
        for path in write_outputs(result, args.out):
            print(f"wrote {path}", file=sys.stderr)
    if result.failed:
        print(f"bench matmul: {', '.join(result.failed)} failed (see above)", file=sys.stderr)
    return 1 if result.failed or not result.rows else 0


if __name__ == "__main__":
    # The worker entry point: python -m edu_dl.bench_matmul --worker TARGET --sizes ...
    worker = argparse.ArgumentParser(prog="python -m edu_dl.bench_matmul")
    worker.add_argument("--worker", choices=list(TARGETS), required=True)
    worker.add_argument("--sizes", type=_int_list, required=True)
    worker.add_argument("--repeats", type=int, required=True)
    worker.add_argument("--batch-s", type=float, required=True)
    worker.add_argument("--threads", type=int, default=None)
    w = worker.parse_args()
    sys.exit(worker_main(w.worker, w.sizes, w.repeats, w.batch_s, w.threads))
