"""``edu-dl bench plan``: the fused plan against the hand-written step, then what planning buys.

The fused plan (``autograd/fusion.py``): the lecture's training step as a static graph, its
plan fused and compiled (``Session(optimize='numba')``: one Numba function on a CPU, generated
CuPy kernels on a GPU), against the hand-written NumPy step, the same plan unfused and eager
edu_dl, with ``bench engine``'s protocol (its workers: interleaved repeats over rounds of fresh
processes, the fastest process's median, and here the rounds' spread) at the tiny and the
lecture sizes, one BLAS thread by default; on a GPU, against CuPy by hand and PyTorch CUDA at
the lecture size. Then ``plan.py``'s sections: pruning and constant folding.
"""

from __future__ import annotations

import argparse
from typing import Any

from edu_dl.bench import course_programs, engine
from edu_dl.bench.common import (
    TIMES,
    busy_note,
    command_line,
    format_ratio,
    format_time,
    limit_threads,
    machine_lines,
)
from edu_dl.bench.device import Device
from edu_dl.bench.plan import DEFAULT_REPEATS, QUICK_REPEATS, plan_section
from edu_dl.bench.problems import SIZES
from edu_dl.bench.report import Benchmark, Json, Report, document
from edu_dl.util.args import positive_int
from edu_dl.util.tables import markdown_table

FUSED_SIZES = {"cpu": ("tiny", "lecture"), "gpu": ("lecture",)}
FUSED_FRAMEWORKS = {"cpu": ("numpy", "planned_assign", "planned", "static_unfused", "eager"),
                    "gpu": ("numpy", "planned_assign", "planned", "static_unfused", "torch")}
FUSED_TITLES = {"numpy": "by hand", "planned_assign": "fused plan, assign(w - lr * g)",
                "planned": "fused plan", "static_unfused": "unfused plan",
                "eager": "edu_dl eager", "torch": "PyTorch"}
# (framework, size, at most this ratio to the hand-written step), on the CPU: the lecture's
# own spelling, and the optimizer's assign_sub.
FUSED_TARGETS = (("planned_assign", "tiny", 0.5), ("planned_assign", "lecture", 0.90),
                 ("planned", "tiny", 0.5), ("planned", "lecture", 0.95))


def run_fused(repeats: int = DEFAULT_REPEATS, quick: bool = False, device: Device | None = None,
              threads: int | None = 1, processes: int = 3, progress_bar: bool = True) -> Any:
    """The lecture's training step: by hand, fused plan, unfused plan, and eager (PyTorch on a
    GPU), timed by ``bench engine``'s workers. An ``engine.EngineResult``."""
    device = device or Device()
    return engine.run_engine(FUSED_SIZES[device.kind], FUSED_FRAMEWORKS[device.kind], repeats,
                             quick=quick, progress_bar=progress_bar, threads=threads,
                             processes=processes, device=device)


def round_ratios(result: Any, size: str, framework: str) -> tuple[float, float] | None:
    """(lowest, highest) over the rounds of this round's median / its hand-written median."""
    mine, hand = result.rounds.get((size, framework)), result.rounds.get((size, "numpy"))
    if not mine or not hand:
        return None
    ratios = [a / b for a, b in zip(mine, hand) if a and b]
    return (min(ratios), max(ratios)) if ratios else None


def fused_markdown(result: Any) -> str:
    """The times, ratios to the hand-written step (with the spread of the rounds: the slowest
    round's ratio), and the targets, measured."""
    device = result.device
    hand = "CuPy by hand" if device.kind == "gpu" else "NumPy by hand"
    titles = {**FUSED_TITLES, "numpy": hand}
    out = [
        "## Fused plan: the training step, planned" + (" on the GPU" if device.kind == "gpu"
                                                       else ""),
        "",
        "One SGD step of the lecture's two-layer net (float32, loss mean(sum((y_pred - y)**2, "
        f"axis=1))). {hand}: the lean hand-written step (in-place update); fused plan: the "
        "same step as a static graph in `Session(optimize='numba')`, updated by "
        "`GradientDescentOptimizer` (`assign_sub`), or, in the TensorFlow lecture's own "
        "spelling, by `w.assign(w - lr * grad)`, its plan fused (elementwise "
        "chains in one pass, updates in place) and compiled"
        + (" (on the GPU: one generated CuPy ElementwiseKernel per elementwise chain and per "
           "update; matmuls and reductions through CuPy; no CUDA graph: CuPy refuses cuBLAS calls "
           "during stream capture)"
           if device.kind == "gpu"
           else " into one Numba function, its matmuls calls of NumPy's own BLAS")
        + "; unfused plan: `optimize='off'`. `bench engine`'s protocol: "
        f"{result.repeats} interleaved repeats over {result.processes} rounds of fresh "
        "processes, the fastest round's median; in parentheses its ratio to the hand-written "
        "step's, and the spread: the lowest and highest ratio of one round's median to the same "
        "round's hand-written median (the two timed side by side). "
        f"Threads per worker: {result.threads or 'each library default'}. Device: "
        f"{device.label}; {device.synced}.",
        "",
    ]
    rows = []
    for size in result.sizes:
        cells = []
        for fw in result.frameworks:
            seconds, ratio = result.seconds.get((size, fw)), result.ratio(size, fw)
            spread = round_ratios(result, size, fw) if fw != "numpy" else None
            rounds = f"; rounds {spread[0]:.2f} to {spread[1]:.2f}" if spread else ""
            cells.append("n/a" if seconds is None else format_time(seconds)
                         + (f" ({format_ratio(ratio)}{rounds})" if ratio else ""))
        rows.append([size, ", ".join(map(str, SIZES[size])), *cells])
    out += markdown_table(["size", "N, D, H, out", *(titles[fw] for fw in result.frameworks)],
                          rows, [False, False, *(True for _ in result.frameworks)])
    if device.kind == "cpu":
        targets = []
        for fw, size, limit in FUSED_TARGETS:
            if fw not in result.frameworks:
                continue
            ratio = result.ratio(size, fw)
            met = "—" if ratio is None else ("yes" if ratio <= limit else "**no**")
            measured = "not measured" if ratio is None else format_ratio(ratio)
            targets.append([f"{FUSED_TITLES[fw]} ≤ {limit}{TIMES} NumPy by hand at {size}",
                            measured, met])
        out += ["", "### Targets", "",
                *markdown_table(["target", "measured", "met"], targets, [False, True, False])]
    notes = [f"- {fw} could not run: {message}" for fw, message in result.errors.items()]
    notes += [f"- {w}" for w in result.warnings]
    busy = busy_note(*result.load)
    notes += [f"- {busy}"] if busy else []
    if notes:
        out += ["", "### Warnings", "", *notes]
    return "\n".join(out) + "\n"


# --------------------------------------------------------------------------- the command


def plan_flags(p: argparse.ArgumentParser) -> None:
    """``edu-dl bench plan``'s own flags: --threads and --processes."""
    p.add_argument("--threads", type=positive_int, default=1,
                   help="BLAS and OpenMP threads per worker (default: 1, the targets' protocol)")
    p.add_argument("--processes", type=positive_int, default=3,
                   help="rounds of fresh worker processes for the fused-plan timings "
                   "(default: 3; 1 with --quick)")


def measure_plan(args: argparse.Namespace, device: Device) -> Report:
    """Run ``edu-dl bench plan``: the fused-plan timings in worker processes and the static-plan
    section in this process; the report and plan.json, status 1 when a framework failed or the
    section measured nothing."""
    result = run_fused(args.repeats, args.quick, device, args.threads, args.processes,
                       progress_bar=not args.no_progress)
    with limit_threads(args.threads):
        section, measured = plan_section(args.repeats, args.quick, device)
        programs = course_programs.survey_markdown(course_programs.survey())
    text = document([fused_markdown(result), programs, section], command_line(args),
                    result.date, machine_lines(device))
    data = result.to_json()
    data["rounds"] = [{"size": size, "framework": fw, "medians": medians}
                      for (size, fw), medians in result.rounds.items()]
    return Report(text, json={"plan.json": Json(data)},
                  status=0 if measured and not result.errors else 1)


PLAN = Benchmark(
    "plan", "what the static Session's plan buys: fusion, pruning and constant folding",
    "Time the lecture's training step as a fused, compiled plan against the hand-written "
    "NumPy step (tiny and lecture sizes; on a GPU, CuPy and PyTorch CUDA at the lecture size), "
    "then say which of the course's static programs fuse (and why not), then compare eager code "
    "with a static Session on graphs with an unused expensive branch (pruning) and a constant "
    "subgraph (constant folding).",
    measure_plan, files=("plan.json",), flags=plan_flags,
    repeats=(DEFAULT_REPEATS, QUICK_REPEATS))
