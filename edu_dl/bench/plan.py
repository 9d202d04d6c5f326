"""``edu-dl bench plan``: what a static Session's plan buys, and where eager's time goes at tiny.

The fused plan (``autograd/fusion.py``): the lecture's training step as a static graph, its
plan fused and compiled (``Session(optimize='numba')``: one Numba function on a CPU), against
the hand-written NumPy step, the same plan unfused and eager edu_dl, with ``bench engine``'s
protocol (its workers: interleaved repeats over rounds of fresh processes, the fastest
process's median) at the tiny and the lecture sizes, one BLAS thread by default; on a GPU, the
same against CuPy by hand and PyTorch CUDA at the lecture size.

The plan: pruning (a fetch that needs a cheap branch of a graph that also holds an expensive one)
and constant folding (a subgraph that depends on no placeholder is computed once, at plan time),
against the same computation written eagerly, where every line runs. On a GPU, every timed batch
ends with a device synchronize. The breakdown (CPU only) times the parts of eager's step.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

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
from edu_dl.bench.problems import SIZES, make_problem
from edu_dl.bench.report import Benchmark, Json, Report, document
from edu_dl.bench.trainers import make_trainer
from edu_dl.gpu.timing import median_seconds
from edu_dl.util.args import positive_int
from edu_dl.util.tables import markdown_table

DEFAULT_REPEATS, QUICK_REPEATS = 11, 2
BATCH_SECONDS, QUICK_BATCH_SECONDS = 0.1, 0.01


@dataclass
class PlanRow:
    name: str
    eager_s: float
    static_s: float
    note: str


def run_plan(repeats: int = DEFAULT_REPEATS, quick: bool = False,
             device: Device | None = None) -> list[PlanRow]:
    """What the static plan buys: pruning unused nodes, folding constant subgraphs once."""
    import edu_dl as ed
    from edu_dl import backend
    from edu_dl import graph as eg

    device = device or Device()
    where, sync = device.runs_on, device.synchronize
    batch_s = QUICK_BATCH_SECONDS if quick else BATCH_SECONDS
    n, d, chain = 64, 512, 4
    rng = np.random.default_rng(0)
    X = rng.standard_normal((n, d)).astype(np.float32)
    W = (rng.standard_normal((d, d)) / math.sqrt(d)).astype(np.float32)
    A = (rng.standard_normal((d, d)) / math.sqrt(d)).astype(np.float32)
    B = (rng.standard_normal((d, d)) / math.sqrt(d)).astype(np.float32)
    X_dev = backend.to_device(X, where)

    def timed(fn: Any) -> float:
        return median_seconds(fn, repeats, batch_s, sync)

    # (a) Pruning: the fetch needs only the cheap sum, but the graph also holds a matmul chain.
    g = eg.Graph()
    with g.as_default():
        x = eg.placeholder(eg.float32, shape=(None, d))
        cheap = eg.reduce_sum(x)
        h = x
        for _ in range(chain):
            h = eg.matmul(h, eg.constant(W))
        expensive = eg.reduce_sum(h)
        sess = eg.Session(device=where)
    feed = {x: X_dev}
    xe, we = ed.tensor(X, device=where), ed.tensor(W, device=where)

    def eager_as_written() -> Any:
        # Eager runs every line of the program, needed or not.
        cheap_value = xe.sum()
        h = xe
        for _ in range(chain):
            h = h @ we
        h.sum()
        return cheap_value

    prune_eager = timed(eager_as_written)
    prune_static = timed(lambda: sess.run(cheap, feed_dict=feed))
    all_static = timed(lambda: sess.run([cheap, expensive], feed_dict=feed))

    # (b) Constant folding: A @ B depends on no placeholder; the Session computes it once.
    g = eg.Graph()
    with g.as_default():
        x = eg.placeholder(eg.float32, shape=(None, d))
        out = eg.reduce_sum(eg.matmul(x, eg.matmul(eg.constant(A), eg.constant(B))))
        sess_fold = eg.Session(device=where)
    feed = {x: X_dev}
    ae, be = ed.tensor(A, device=where), ed.tensor(B, device=where)
    fold_eager = timed(lambda: (xe @ (ae @ be)).sum())
    fold_static = timed(lambda: sess_fold.run(out, feed_dict=feed))

    return [
        PlanRow(
            "pruning: fetch a cheap sum from a graph that also holds an unused chain of "
            f"{chain} ({n}, {d}) @ ({d}, {d}) matmuls",
            prune_eager,
            prune_static,
            f"static fetching both branches: {format_time(all_static)}",
        ),
        PlanRow(
            f"constant folding: x @ (A @ B) with constant ({d}, {d}) A, B and x of ({n}, {d})",
            fold_eager,
            fold_static,
            "eager recomputes A @ B every run; the Session folds it once at plan time",
        ),
    ]


def plan_markdown(rows: list[PlanRow], device: Device | None = None) -> str:
    device = device or Device()
    out = [
        "## Static plan: what planning once buys" + (" on the GPU" if device.kind == "gpu"
                                                     else ""),
        "",
        "The same computation written eagerly (every line runs) and as a static graph "
        f"(`Session.run` executes its plan). Median per run. Device: {device.label}; "
        f"{device.synced}.",
        "",
        *markdown_table(
            ["optimization", "eager", "static Session", "speed-up", "note"],
            [[row.name, format_time(row.eager_s), format_time(row.static_s),
              format_ratio(row.eager_s / row.static_s), row.note] for row in rows],
            [False, True, True, True, False]),
    ]
    return "\n".join(out) + "\n"


def plan_section(repeats: int, quick: bool, device: Device) -> tuple[str, bool]:
    """(the plan's Markdown, True), or (a section of one sentence on why not, False)."""
    try:
        return plan_markdown(run_plan(repeats, quick, device), device), True
    except ImportError as exc:
        reason = f"not measured: the static graph is not available ({exc})."
    except Exception as exc:
        reason = f"not measured: {type(exc).__name__}: {exc}"
    print(f"warning: static plan {reason}", file=sys.stderr)
    return "## Static plan\n\n" + reason + "\n", False


# --------------------------------------------------------------------------- eager's time at tiny


def eager_breakdown(size: str = "tiny", repeats: int = DEFAULT_REPEATS,
                    quick: bool = False) -> list[tuple[str, float]]:
    """Seconds per part of eager's step (forward, backward, optimizer), in this process.

    At tiny sizes the arrays are so small that almost all of it is Python overhead per op.
    """
    import edu_dl as ed
    from edu_dl import optim

    batch_s = QUICK_BATCH_SECONDS if quick else BATCH_SECONDS
    p = make_problem(size)
    x, y = ed.tensor(p.X), ed.tensor(p.Y)
    w1 = ed.tensor(p.w1, requires_grad=True)
    w2 = ed.tensor(p.w2, requires_grad=True)
    opt = optim.SGD([w1, w2], lr=p.spec.lr("sgd"))

    def forward() -> Any:
        return (((x @ w1).relu() @ w2 - y) ** 2).sum(axis=1).mean()

    def timed_parts(steps: int) -> tuple[float, float, float]:
        # One clock read between parts costs ~0.1 µs: small next to each part.
        clock = time.perf_counter
        forward_s = backward_s = update_s = 0.0
        for _ in range(steps):
            t0 = clock()
            loss = forward()
            t1 = clock()
            opt.zero_grad()
            loss.backward()
            t2 = clock()
            opt.step()
            t3 = clock()
            forward_s += t1 - t0
            backward_s += t2 - t1
            update_s += t3 - t2
        return forward_s / steps, backward_s / steps, update_s / steps

    t_numpy = median_seconds(make_trainer("numpy", size).step, repeats, batch_s)
    steps = max(1, round(batch_s / max(sum(timed_parts(50)), 1e-9)))
    samples = [timed_parts(steps) for _ in range(repeats)]
    parts = zip(*samples, strict=True)
    t_forward, t_backward, t_update = (statistics.median(part) for part in parts)
    return [
        ("forward: 7 ops (matmul, relu, matmul, sub, pow, sum, mean)", t_forward),
        ("backward: zero_grad, graph walk, 7 VJPs, leaf gradients", t_backward),
        ("optimizer: SGD step", t_update),
        ("eager step, in all", t_forward + t_backward + t_update),
        ("hand-written NumPy step, for comparison", t_numpy),
    ]


def breakdown_markdown(rows: list[tuple[str, float]], size: str = "tiny") -> str:
    total = rows[-2][1]
    out = [
        f"## Where edu_dl eager's time goes at {size}",
        "",
        "Measured in one process: each part timed inside the step, median over batches.",
        "",
        *markdown_table(
            ["part", "time", "share of eager's step"],
            [[name, format_time(seconds), f"{seconds / total:.0%}" if i < len(rows) - 1 else ""]
             for i, (name, seconds) in enumerate(rows)],
            [False, True, True]),
    ]
    return "\n".join(out) + "\n"


# --------------------------------------------------------------------------- the fused plan

FUSED_SIZES = {"cpu": ("tiny", "lecture"), "gpu": ("lecture",)}
FUSED_FRAMEWORKS = {"cpu": ("numpy", "planned", "static_unfused", "eager"),
                    "gpu": ("numpy", "planned", "static_unfused", "torch")}
FUSED_TITLES = {"numpy": "by hand", "planned": "fused plan", "static_unfused": "unfused plan",
                "eager": "edu_dl eager", "torch": "PyTorch"}
# Issue 29: the fused plan / the hand-written step, at most this, per size (on the CPU).
FUSED_TARGETS = {"tiny": 0.5, "lecture": 0.95}


def run_fused(repeats: int = DEFAULT_REPEATS, quick: bool = False, device: Device | None = None,
              threads: int | None = 1, processes: int = 3, progress_bar: bool = True) -> Any:
    """The lecture's training step: by hand, fused plan, unfused plan, and eager (PyTorch on a
    GPU), timed by ``bench engine``'s workers. An ``engine.EngineResult``."""
    from edu_dl.bench import engine

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
        "same step as a static graph in `Session(optimize='numba')`, its plan fused (elementwise "
        "chains in one pass, updates in place) and compiled"
        + (" (on the GPU: one generated CuPy ElementwiseKernel per elementwise chain and per "
           "update; matmuls and reductions through CuPy; no CUDA graph)"
           if device.kind == "gpu" else " into one Numba function")
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
        for size, limit in FUSED_TARGETS.items():
            ratio = result.ratio(size, "planned")
            met = "—" if ratio is None else ("yes" if ratio <= limit else "**no**")
            measured = "not measured" if ratio is None else format_ratio(ratio)
            targets.append([f"fused plan ≤ {limit}{TIMES} NumPy by hand at {size}", measured,
                            met])
        out += ["", "### Targets (issue 29)", "",
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
    p.add_argument("--threads", type=positive_int, default=1,
                   help="BLAS and OpenMP threads per worker (default: 1, the targets' protocol)")
    p.add_argument("--processes", type=positive_int, default=3,
                   help="rounds of fresh worker processes for the fused-plan timings "
                   "(default: 3; 1 with --quick)")


def measure_plan(args: argparse.Namespace, device: Device) -> Report:
    result = run_fused(args.repeats, args.quick, device, args.threads, args.processes,
                       progress_bar=not args.no_progress)
    with limit_threads(args.threads):
        section, measured = plan_section(args.repeats, args.quick, device)
    text = document([fused_markdown(result), section], command_line(args), result.date,
                    machine_lines(device))
    return Report(text, json={"plan.json": Json(result.to_json())},
                  status=0 if measured and not result.errors else 1)


PLAN = Benchmark(
    "plan", "what the static Session's plan buys: fusion, pruning and constant folding",
    "Time the lecture's training step as a fused, compiled plan against the hand-written "
    "NumPy step (tiny and lecture sizes; on a GPU, CuPy and PyTorch CUDA at the lecture size), "
    "then compare eager code with a static Session on graphs with an unused expensive branch "
    "(pruning) and a constant subgraph (constant folding).",
    measure_plan, files=("plan.json",), flags=plan_flags,
    repeats=(DEFAULT_REPEATS, QUICK_REPEATS))
