"""The multi-device pitfalls the lecture names, with this machine's numbers filled in."""

from __future__ import annotations

import textwrap

import numpy as np

from edu_dl.parallel.torch_dp import ParallelResult

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
        "and its optimizer state; only the batch is split. A model too big for one GPU does not "
        "fit on eight either (that needs model, pipeline or tensor parallelism)."
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
