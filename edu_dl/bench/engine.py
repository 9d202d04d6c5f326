"""``edu-dl bench engine``: how fast is one training step in each framework, on a CPU or a GPU?

One SGD step (forward, backward, update; float32) of the lecture's two-layer ReLU net,
y_pred = relu(x @ w1) @ w2 with loss = mean(sum((y_pred - y)**2, axis=1)), at the sizes of
``models.SIZES``, in:

- ``numpy``: hand-written gradients as the lecture writes them, through ``xp``: NumPy on the
  CPU, CuPy on the GPU (the baseline every ratio refers to);
- ``eager``: edu_dl's eager Tensors and ``optim.SGD`` (on CuPy with ``--device gpu``);
- ``static``: edu_dl's static graph (``Session.run([loss, train])``, its plan fused into NumPy
  code: ``optimize='numpy'``; ``bench plan`` times it compiled), with the same ops as eager
  (``nn.relu``, not the lecture's ``maximum(h, 0)``, whose gradient also finds ties);
- ``torch``: PyTorch eager with ``torch.optim.SGD`` (CUDA on the GPU);
- ``tf_function``: the TF 2 twin's step (``twins.tf2_eager.make_step``) in a ``tf.function``;
- ``host`` (GPU mode only): the NumPy step on the host CPU, to show what the GPU buys.

Each framework runs in long-lived worker processes of its own (``worker.Worker``). The parent
interleaves the repeats across workers, so all see the same machine conditions, splits them among
a few rounds of fresh workers, and reports the median of the fastest round (a slow process says
nothing about the code it runs). On a GPU every timed batch ends with a device synchronize.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from edu_dl.bench import plan
from edu_dl.bench.common import (
    TIMES,
    busy_note,
    command_line,
    format_ratio,
    format_time,
    limit_threads,
    load_average,
    machine_lines,
    now,
    progress,
)
from edu_dl.bench.device import Device
from edu_dl.bench.problems import CPU_SIZES, GPU_SIZES, SIZES
from edu_dl.bench.report import Benchmark, Json, Report, document, pyplot
from edu_dl.util.args import comma_list, positive_int
from edu_dl.util.tables import markdown_table
from edu_dl.util.worker import DEFAULT_TIMEOUT_S, Worker, WorkerError

TRAINERS = "edu_dl.bench.trainers"  # where the workers find setup, calibrate_steps, time_batch

FRAMEWORKS: tuple[str, ...] = ("numpy", "eager", "static", "torch", "tf_function", "host")
CPU_FRAMEWORKS = FRAMEWORKS[:-1]
GPU_FRAMEWORKS = FRAMEWORKS
TITLES: dict[str, dict[str, str]] = {
    "cpu": {"numpy": "NumPy by hand", "eager": "edu_dl eager", "static": "edu_dl static",
            "torch": "PyTorch eager", "tf_function": "TF tf.function",
            "host": "NumPy by hand"},
    "gpu": {"numpy": "CuPy by hand", "eager": "edu_dl eager (CuPy)",
            "static": "edu_dl static (CuPy)", "torch": "PyTorch CUDA",
            "tf_function": "TF tf.function (GPU)", "host": "NumPy by hand, host CPU"},
}
BASELINE = "numpy"

DEFAULT_REPEATS = 11
QUICK_REPEATS = 2
# Fresh worker processes per framework, the repeats split among them; the fastest process's median
# counts. On the shared 2-core VM of benchmarks/RESULTS.md, 2-3 of 10 fresh workers ran the very
# same steps about 1.5x slower, throughout (10 NumPy workers, one after another: 14.0, 14.1, 14.1,
# 22.2, 22.0, 13.9, 13.8, 14.5 us), which interleaving within one process cannot even out.
DEFAULT_PROCESSES = 3
# Seconds one timed batch of steps should last: long enough to swamp timer and pipe overhead,
# short enough for many interleaved repeats.
BATCH_SECONDS = 0.1
QUICK_BATCH_SECONDS = 0.01
# Pause between batches: OpenBLAS and OpenMP helper threads keep spinning for a while after
# their last call, and would steal a core from the next worker's batch.
SETTLE_SECONDS = 0.05
# First losses of two frameworks that differ more than this (relative) earn a warning.
LOSS_RTOL = 1e-4


# --------------------------------------------------------------------------- in the parent


@dataclass
class EngineResult:
    """Median seconds per step for each (size, framework); None where it could not run."""

    sizes: list[str]
    frameworks: list[str]
    repeats: int
    processes: int = 1  # fresh worker processes per framework, the repeats split among them
    seconds: dict[tuple[str, str], float | None] = field(default_factory=dict)
    first_losses: dict[tuple[str, str], float] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    date: str = ""
    # 1-minute load averages before and after: other processes on the machine skew every number.
    load: tuple[float, float] = (0.0, 0.0)
    threads: int | None = None  # None: each library's default thread count
    device: Device = field(default_factory=Device)
    # Each round's median per (size, framework), in round order: the spread behind ``seconds``.
    rounds: dict[tuple[str, str], list[float]] = field(default_factory=dict)

    def ratio(self, size: str, framework: str, to: str = BASELINE) -> float | None:
        a, b = self.seconds.get((size, framework)), self.seconds.get((size, to))
        return a / b if a and b else None

    def to_json(self) -> dict[str, Any]:
        return {"sizes": self.sizes, "frameworks": self.frameworks, "repeats": self.repeats,
                "processes": self.processes, "date": self.date, "threads": self.threads,
                "device": self.device.kind, "fake": self.device.fake, "load": self.load,
                "errors": self.errors, "warnings": self.warnings,
                "rows": [{"size": s, "framework": f, "seconds": self.seconds.get((s, f)),
                          "first_loss": self.first_losses.get((s, f))}
                         for s in self.sizes for f in self.frameworks]}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> EngineResult:
        result = cls(data["sizes"], data["frameworks"], data["repeats"], data["processes"],
                     errors=data["errors"], warnings=data["warnings"], date=data["date"],
                     load=tuple(data["load"]), threads=data["threads"],
                     device=Device(data["device"], data["fake"]))
        for row in data["rows"]:
            result.seconds[row["size"], row["framework"]] = row["seconds"]
            if row["first_loss"] is not None:
                result.first_losses[row["size"], row["framework"]] = row["first_loss"]
        return result


def run_engine(
    sizes: Sequence[str] = CPU_SIZES,
    frameworks: Sequence[str] = CPU_FRAMEWORKS,
    repeats: int = DEFAULT_REPEATS,
    quick: bool = False,
    progress_bar: bool = True,
    threads: int | None = None,
    processes: int = DEFAULT_PROCESSES,
    device: Device | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> EngineResult:
    """Time every framework at every size, interleaving repeats across the worker processes.

    The repeats are split among ``processes`` rounds, each with fresh workers. Each round gives
    the median of its batches; the result is the fastest round, the same for every framework
    (best of N, as timeit's minimum): a slow process says nothing about the code it runs.
    Batches keep the length calibrated in the first round.
    """
    device = device or Device()
    processes = 1 if quick else max(1, min(processes, repeats))
    result = EngineResult(list(sizes), list(frameworks), repeats, processes, threads=threads,
                          device=device, date=now())
    load_before = load_average()
    batch_s = QUICK_BATCH_SECONDS if quick else BATCH_SECONDS
    warmup_s = 0.02 if quick else 0.3
    per_round = [repeats // processes + (i < repeats % processes) for i in range(processes)]
    samples: dict[tuple[str, str], list[list[float]]] = {}  # one list per round
    steps: dict[tuple[str, str], int] = {}
    bar = progress(len(sizes) * len(frameworks) * repeats, "bench engine", progress_bar)
    try:
        for round_repeats in per_round:
            alive = [fw for fw in frameworks if fw not in result.errors]
            workers = {fw: Worker(f"{fw} ({device.label})", threads=threads) for fw in alive}
            for size in sizes:
                for fw in alive:
                    samples.setdefault((size, fw), []).append([])
            try:
                for size in sizes:
                    bar.set_postfix_str(size)
                    _time_size(result, size, workers, round_repeats, batch_s, warmup_s,
                               samples, steps, bar, 0.0 if quick else SETTLE_SECONDS, timeout_s)
            finally:
                for worker in workers.values():
                    worker.close()
        for size in sizes:
            for fw in frameworks:
                rounds = [statistics.median(r) for r in samples.get((size, fw), []) if r]
                result.seconds[size, fw] = min(rounds) if rounds else None
                result.rounds[size, fw] = rounds
    finally:
        bar.close()
    result.load = (load_before, load_average())
    for fw, message in result.errors.items():
        print(f"warning: {fw} could not run: {message}", file=sys.stderr)
    return result


def _time_size(result: EngineResult, size: str, workers: dict[str, Worker], repeats: int,
               batch_s: float, warmup_s: float, samples: dict[tuple[str, str], list[list[float]]],
               steps: dict[tuple[str, str], int], bar: Any, settle_s: float,
               timeout_s: float) -> None:
    """One round at one size: set up, calibrate (first round only), then interleaved batches."""
    alive = [fw for fw in workers if fw not in result.errors]
    device = result.device
    # Set-up and warm-up are not timed, so the workers may do them side by side.
    for fw in alive:
        workers[fw].send(f"{TRAINERS}:setup", framework=fw, size=size, warmup_s=warmup_s,
                         device=device.kind, fake=device.fake)
    for fw in alive:
        try:
            result.first_losses[size, fw] = workers[fw].receive(timeout_s)["first_loss"]
        except WorkerError as exc:
            result.errors[fw] = str(exc)
    alive = [fw for fw in alive if fw not in result.errors]
    _check_losses(result, size, alive)

    def ask(fw: str, call: str, **kwargs: Any) -> Any:
        try:
            return workers[fw].call(f"{TRAINERS}:{call}", timeout_s, **kwargs)
        except WorkerError as exc:  # a worker that fails mid-way loses its framework only
            result.errors[fw] = str(exc)
            return None

    for fw in alive:  # one at a time: calibration is timing
        if (size, fw) not in steps and fw not in result.errors:
            steps[size, fw] = ask(fw, "calibrate_steps", target_s=batch_s)
    for _ in range(repeats):
        for fw in alive:
            seconds = None if fw in result.errors else ask(fw, "time_batch",
                                                           steps=steps[size, fw])
            if seconds is not None:
                samples[size, fw][-1].append(seconds)
                time.sleep(settle_s)
            bar.update()


def _check_losses(result: EngineResult, size: str, frameworks: list[str]) -> None:
    """Warn when a framework's first loss (initial weights) disagrees with the others'."""
    if not frameworks:
        return
    reference = BASELINE if BASELINE in frameworks else frameworks[0]
    ref = result.first_losses[size, reference]
    for fw in frameworks:
        loss = result.first_losses[size, fw]
        if not abs(loss - ref) <= LOSS_RTOL * abs(ref):
            message = (
                f"{size}: the first loss of {fw} ({loss:.7g}) differs from {reference}'s "
                f"({ref:.7g}) by more than float32 tolerance (rtol {LOSS_RTOL:g})"
            )
            if message not in result.warnings:  # each round of processes checks again
                result.warnings.append(message)
                print(f"warning: {message}", file=sys.stderr)


# --------------------------------------------------------------------------- targets


@dataclass(frozen=True)
class Target:
    """At ``size``, time(framework) / time(other) must be <= ``limit`` (>= when not upper)."""

    text: str
    size: str
    framework: str
    other: str
    limit: float
    upper: bool = True

    def measure(self, result: EngineResult) -> float | None:
        return result.ratio(self.size, self.framework, to=self.other)


TARGETS: tuple[Target, ...] = (  # on the CPU
    Target(f"eager ≤ 1.05{TIMES} NumPy at large", "large", "eager", "numpy", 1.05),
    Target(f"eager ≤ 1.10{TIMES} NumPy at lecture", "lecture", "eager", "numpy", 1.10),
    Target(f"eager ≤ 1.10{TIMES} NumPy at lecture_tf", "lecture_tf", "eager", "numpy", 1.10),
    Target(f"eager ≤ 2.0{TIMES} NumPy at tiny", "tiny", "eager", "numpy", 2.0),
    Target(f"eager ≥ 4{TIMES} faster than PyTorch eager at tiny", "tiny", "torch", "eager", 4.0,
           upper=False),
    Target("static no slower than eager at tiny", "tiny", "static", "eager", 1.0),
)
GPU_TARGETS: tuple[Target, ...] = (  # on a GPU: the H100 baseline was 1.00-1.03x and 1.22x
    *(Target(f"{fw} ≤ 1.05{TIMES} CuPy by hand at {size}", size, fw, "numpy", 1.05)
      for size in GPU_SIZES for fw in ("eager", "static")),
    *(Target(f"{fw} ≤ 1.2{TIMES} PyTorch CUDA at large", "large", fw, "torch", 1.2)
      for fw in ("eager", "static")),
)


def check_targets(result: EngineResult) -> list[tuple[Target, float | None, bool | None]]:
    """(target, measured ratio, met); ratio and met are None where it was not measured."""
    rows: list[tuple[Target, float | None, bool | None]] = []
    for target in GPU_TARGETS if result.device.kind == "gpu" else TARGETS:
        ratio = target.measure(result)
        met = None if ratio is None else (ratio <= target.limit if target.upper
                                          else ratio >= target.limit)
        rows.append((target, ratio, met))
    return rows


# --------------------------------------------------------------------------- the report


def engine_markdown(result: EngineResult) -> str:
    """The table (time per step and ratio to the hand-written baseline), targets and warnings."""
    fws, device = result.frameworks, result.device
    titles = TITLES[device.kind]
    on_gpu = device.kind == "gpu"
    out = [
        "## Engine: one training step of the two-layer ReLU net" + (" on the GPU" if on_gpu
                                                                     else ""),
        "",
        "One SGD step (forward, backward, update; float32) of y_pred = relu(x @ w1) @ w2, with "
        "the lecture's loss: the mean over the batch of each row's summed squared error, "
        "loss = mean(sum((y_pred - y)**2, axis=1)). Each framework runs in its own process; "
        f"{result.repeats} interleaved repeats of ~{BATCH_SECONDS * 1000:.0f} ms batches are "
        f"split among {result.processes} fresh process"
        f"{'es' if result.processes != 1 else ''} per framework, and the fastest process's "
        "median is shown (on this shared VM 2-3 of 10 fresh processes ran the same code about "
        "1.5x slower, throughout; best of N, as timeit's minimum), with the ratio to "
        f"{titles[BASELINE]} in parentheses (lower is faster). edu_dl eager and static run the "
        "same ops (relu, matmul, sub, pow, sum, mean); edu_dl's matmul calls `ndarray.dot` for "
        "2-D operands, the same BLAS product as `@` for half the call overhead on tiny "
        "matrices, while the hand-written baseline is written as the lecture writes it, with "
        "`@`. Threads: "
        + ("each library's default." if result.threads is None else
           f"capped at {result.threads} per worker (`--threads {result.threads}`: OpenBLAS, "
           "OpenMP and TensorFlow's pools)."),
        "",
        f"Device: {device.label}; {device.synced}.",
        "",
    ]
    rows = []
    for size in result.sizes:
        cells = []
        for fw in fws:
            seconds = result.seconds.get((size, fw))
            ratio = result.ratio(size, fw)
            cells.append("n/a" if seconds is None else format_time(seconds)
                         + (f" ({format_ratio(ratio)})" if ratio else ""))
        rows.append([size, ", ".join(map(str, SIZES[size])), *cells])
    out += markdown_table(["size", "N, D, H, out", *(titles[fw] for fw in fws)], rows,
                          [False, False, *(True for _ in fws)])
    heading = "### GPU targets" if on_gpu else "### Targets"
    targets = []
    for target, ratio, met in check_targets(result):
        measured = "not measured" if ratio is None else format_ratio(ratio)
        verdict = "—" if met is None else ("yes" if met else "**no**")
        targets.append([target.text, f"{target.framework} / {target.other} = {measured}",
                        verdict])
    out += ["", heading, "", *markdown_table(["target", "measured", "met"], targets,
                                             [False, True, False])]
    notes = [f"- {fw} could not run: {message}" for fw, message in result.errors.items()]
    notes += [f"- {w}" for w in result.warnings]
    busy = busy_note(*result.load)
    notes += [f"- {busy}"] if busy else []
    if notes:
        out += ["", "### Warnings", "", *notes]
    else:
        out += ["", "All frameworks' first losses (at the shared initial weights) agree to "
                f"rtol {LOSS_RTOL:g}."]
    return "\n".join(out) + "\n"


def write_plot(result: EngineResult, path: Path) -> Path:
    """Bar chart of the ratios to the hand-written baseline, one group per size (log scale)."""
    plt = pyplot()
    titles = TITLES[result.device.kind]
    fig, ax = plt.subplots(figsize=(8, 4))
    width = 0.8 / len(result.frameworks)
    for i, fw in enumerate(result.frameworks):
        ratios = [result.ratio(size, fw) or 0.0 for size in result.sizes]
        xs = [j + i * width for j in range(len(result.sizes))]
        ax.bar(xs, ratios, width, label=titles[fw])
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(result.sizes))], result.sizes)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_yscale("log")
    ax.set_ylabel(f"time per step / {titles[BASELINE]}")
    ax.set_title("One training step of the two-layer ReLU net (lower is faster)"
                 + (f", {result.device.label}" if result.device.kind == "gpu" else ""))
    ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


# --------------------------------------------------------------------------- the command


def engine_flags(p: argparse.ArgumentParser) -> None:
    """``edu-dl bench engine``'s own flags: --sizes, --frameworks, --threads, --processes, --plot
    and --no-plan."""
    p.add_argument("--sizes", type=comma_list(tuple(SIZES), "size"), default=None,
                   help=f"comma-separated sizes (default: {','.join(CPU_SIZES)}; with --device "
                   f"gpu {','.join(GPU_SIZES)})")
    p.add_argument("--frameworks", type=comma_list(FRAMEWORKS, "framework"), default=None,
                   help=f"comma-separated frameworks (default: {','.join(CPU_FRAMEWORKS)}; with "
                   "--device gpu also host, the NumPy step on the host CPU)")
    p.add_argument("--threads", type=positive_int,
                   help="cap every library's thread pool (BLAS, OpenMP, TensorFlow) at N per "
                   "worker; default: each library's own choice. 1 keeps a busy shared machine "
                   "from wrecking multi-threaded BLAS timings")
    p.add_argument("--processes", type=positive_int, default=DEFAULT_PROCESSES,
                   help="fresh worker processes per framework, the repeats split among them "
                   f"(default: {DEFAULT_PROCESSES}; 1 with --quick); the fastest process's "
                   "median counts, so that no single slow process decides a result")
    p.add_argument("--plot", type=Path, metavar="PNG",
                   help="also draw the ratios to the hand-written baseline into this PNG")
    p.add_argument("--no-plan", action="store_true",
                   help="leave out the static-plan section (bench plan)")


def measure_engine(args: argparse.Namespace, device: Device) -> Report:
    """Run ``edu-dl bench engine``: each framework's training step at each size in fresh worker
    processes, then in this process the static-plan section and (on the CPU, at size tiny)
    eager's breakdown; the report, engine.json and engine.png."""
    on_gpu = device.kind == "gpu"
    sizes = args.sizes or list(GPU_SIZES if on_gpu else CPU_SIZES)
    frameworks = args.frameworks or list(GPU_FRAMEWORKS if on_gpu else CPU_FRAMEWORKS)
    repeats = args.repeats
    result = run_engine(sizes, frameworks, repeats, quick=args.quick,
                        progress_bar=not args.no_progress, threads=args.threads,
                        processes=args.processes, device=device, timeout_s=args.timeout)
    sections = [engine_markdown(result)]
    with limit_threads(args.threads):  # these two run in this process
        if not args.no_plan and "static" in frameworks:
            sections.append(plan.plan_section(repeats, args.quick, device)[0])
        if "eager" in frameworks and "tiny" in sizes and not on_gpu:
            rows = plan.eager_breakdown("tiny", repeats, quick=args.quick)
            sections.append(plan.breakdown_markdown(rows))
    if args.plot is not None:
        write_plot(result, args.plot)
        print(f"wrote {args.plot}", file=sys.stderr)
    return Report(document(sections, command_line(args), result.date, machine_lines(device)),
                  json={"engine.json": Json(result.to_json())},
                  plots={"engine.png": lambda path: write_plot(result, path)})


ENGINE = Benchmark(
    "engine", "one training step of the two-layer net, per framework and size",
    "Time one training step (forward, backward, SGD update; float32) of the two-layer ReLU net "
    "in each framework, each in its own process, and compare with hand-written NumPy (CuPy "
    "with --device gpu).",
    measure_engine, files=("engine.json", "engine.png"), flags=engine_flags,
    repeats=(DEFAULT_REPEATS, QUICK_REPEATS), timeout=True)
