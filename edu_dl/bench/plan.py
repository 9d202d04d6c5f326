"""``edu-dl bench plan``'s static sections: what planning once buys, and where eager's time
goes at tiny (the command and its fused-plan section: ``fused.py``).

The plan: pruning (a fetch that needs a cheap branch of a graph that also holds an expensive one)
and constant folding (a subgraph that depends on no placeholder is computed once, at plan time),
against the same computation written eagerly, where every line runs. On a GPU, every timed batch
ends with a device synchronize. The breakdown (CPU only) times the parts of eager's step.
"""

from __future__ import annotations

import math
import statistics
import sys
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from edu_dl.bench.common import format_ratio, format_time
from edu_dl.bench.device import Device
from edu_dl.bench.problems import make_problem
from edu_dl.bench.trainers import make_trainer
from edu_dl.gpu.timing import median_seconds
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
    """The static-plan section as Markdown: eager and static medians, speed-up, per optimization."""
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
    """Eager's step split into parts as Markdown, with each part's share of the step; ``rows`` as
    eager_breakdown returns them (the whole step second to last)."""
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
