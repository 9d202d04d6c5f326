"""What the lecture shows of data parallelism: the pitfalls it names, with this machine's numbers
filled in, and the diagram of one data-parallel step."""

from __future__ import annotations

import textwrap
from typing import TYPE_CHECKING

import numpy as np

from edu_dl.parallel.torch_dp import ParallelResult

if TYPE_CHECKING:
    from matplotlib.axes import Axes

# Optimizer state kept per parameter, in copies of the weights: SGD none, momentum 1, Adam 2.
STATE_COPIES = {"sgd": 0, "momentum": 1, "adam": 2}


def _mb(n_bytes: float) -> str:
    return f"{n_bytes / 1e6:.3g} MB"


def max_rel_diff(a: list[np.ndarray], b: list[np.ndarray]) -> float:
    """max over arrays of max|a - b| / max|b|: how far two runs' weights drifted apart."""
    return max(float(np.abs(x - y).max() / max(np.abs(y).max(), 1e-300)) for x, y in zip(a, b))


def pitfalls(
    parallel: ParallelResult | None = None,
    single: ParallelResult | None = None,
    width: int = 100,
) -> str:
    """Plain-text summary of the pitfalls; with results, each line quotes the measured numbers."""
    lines = ["Pitfalls of training on many devices (data parallelism):"]
    memory = (
        "1. Limited memory per GPU: every device holds a full copy of the model, its gradients "
        "and its optimizer state; only the batch is split. With data parallelism alone, a model "
        "too big for one GPU does not fit on eight either: that needs its states sharded over "
        "the devices (ZeRO-3, FSDP) or its layers split (tensor or pipeline parallelism)."
    )
    transfer = (
        "2. Transfer bottlenecks: every step, every gradient crosses between devices (over NVLink, "
        "or over PCIe: directly between GPUs where peer-to-peer access is supported, else through "
        "host memory); the batch crosses from CPU to GPU."
    )
    unstable = (
        "3. Instability with many GPUs: R devices make the global batch R times larger, which "
        "changes the optimisation (scale the learning rate, warm up); one failed worker stops "
        "them all; sums in a different order change the last bits."
    )
    correct = (
        "4. Parallelizing correctly: AVERAGE the gradients (gloo has no AVG: sum, then divide by "
        "R); use a mean loss over equal shards, or scale each replica's sum by the GLOBAL batch "
        "(tf.nn.compute_average_loss); start every replica from the same weights (DDP "
        "broadcasts rank 0's); give each rank different rows (DistributedSampler)."
    )
    debugging = (
        "5. Hard debugging and profiling: an error surfaces in one of R processes while the others "
        "wait in a collective; bounded timeouts and a parent that collects tracebacks are a must."
    )
    if parallel is not None:
        r = parallel.world_size
        n_params = sum(w.size for w in parallel.weights)
        item = parallel.weights[0].itemsize
        rows = parallel.rows_per_rank[0]
        memory += (
            f" Here: {n_params:,} parameters = {_mb(n_params * item)} of weights + "
            f"{_mb(n_params * item)} of gradients on EACH of {r} workers (Adam would add "
            f"{_mb(STATE_COPIES['adam'] * n_params * item)}); each worker's batch is {rows} rows."
        )
        ring = 2 * (r - 1) / r * n_params * item  # bytes a worker sends in a ring all-reduce
        steps = parallel.losses.shape[1]
        transfer += (
            f" Here: each step all-reduces {_mb(n_params * item)} of gradients (a ring sends "
            f"{_mb(ring)} per worker), {_mb(ring * steps)} over {steps} steps."
        )
        if single is not None:
            per = [res.seconds / max(steps, 1) * 1e3 for res in (parallel, single)]
            slower = parallel.wall_seconds > single.wall_seconds
            transfer += (
                f" {r} workers: {per[0]:.3g} ms/step in the loop against {per[1]:.3g} ms/step "
                f"for one process; {parallel.wall_seconds:.3g} s against "
                f"{single.wall_seconds:.3g} s with start-up."
                + (
                    " For a model this small, start-up and communication cost more than "
                    "splitting the batch saves."
                    if slower
                    else ""
                )
            )
            unstable += (
                f" Here the {r}-worker weights differ from one process's by "
                f"{max_rel_diff(parallel.weights, single.weights):.1e} (relative), not 0."
            )
    items = [memory, transfer, unstable, correct, debugging]
    lines += [textwrap.fill(item, width=width, subsequent_indent="   ") for item in items]
    return "\n".join(lines)


def draw_data_parallel_step(batch_size: int = 64, ax: Axes | None = None) -> Axes:
    """Draw one data-parallel SGD step on two workers; returns the Axes drawn into.

    The batch is split in two halves; each worker runs forward and backward on its half and gets
    its own gradient g_r; one all-reduce (mean) gives both g = (g_0 + g_1) / 2; both apply the
    same update. Only the gradients cross between the workers. Without ``ax``, a new pyplot
    figure (11 x 4.2 inches) holds the diagram.
    """
    from matplotlib.patches import FancyBboxPatch

    from edu_dl.notebook.lecture import PALETTE

    if batch_size < 2 or batch_size % 2:
        raise ValueError(f"the diagram splits the batch in two halves: got {batch_size} rows")
    half = batch_size // 2
    if ax is None:
        import matplotlib.pyplot as plt

        _, ax = plt.subplots(figsize=(11, 4.2))

    def box(x: float, y: float, w: float, h: float, text: str, color: str) -> None:
        ax.add_patch(FancyBboxPatch((x, y), w, h, boxstyle="round,pad=0.02,rounding_size=0.08",
                                    facecolor=color, edgecolor="0.2", alpha=0.9))
        ax.text(x + w / 2, y + h / 2, text, ha="center", va="center", fontsize=9)

    def arrow(start: tuple[float, float], end: tuple[float, float]) -> None:
        ax.annotate("", xy=end, xytext=start,
                    arrowprops={"arrowstyle": "->", "color": "0.2", "lw": 1.2})

    ax.set_xlim(0, 11)
    ax.set_ylim(0, 4.4)
    ax.axis("off")
    box(0.1, 1.2, 1.3, 2.0, f"batch\nX, y\n{batch_size} rows", "0.85")
    for r, y0 in ((0, 2.75), (1, 0.55)):  # each worker's lane, worker 0 on top
        middle = y0 + 0.45
        arrow((1.4, 2.2), (1.9, middle))
        box(1.9, y0, 1.5, 0.9, f"worker {r}\nrows {half * r}..{half * r + half - 1}\n"
            "replica of w", PALETTE[5])
        arrow((3.4, middle), (3.7, middle))
        box(3.7, y0, 1.6, 0.9, f"forward:\nloss$_{r}$ = mean over\nits {half} rows", PALETTE[1])
        arrow((5.3, middle), (5.6, middle))
        box(5.6, y0, 1.2, 0.9, f"backward:\n$g_{r}$", PALETTE[1])
        arrow((6.8, middle), (7.25, 2.2))
        arrow((8.65, 2.2), (9.1, middle))
        box(9.1, y0, 1.8, 0.9, "same update:\nw \u2190 w \u2212 lr\u00b7g", PALETTE[2])
    box(7.25, 1.55, 1.4, 1.3, "all-reduce\n(mean)\n$g = (g_0 + g_1)/2$", PALETTE[4])
    ax.text(5.5, 4.15, "one data-parallel SGD step: only the gradients cross between workers",
            ha="center", fontsize=11)
    return ax
