"""``edu-dl bench parallel``: one process vs R workers (all_reduce, DDP) vs MirroredStrategy.

On the CPU the workers talk through gloo; with ``--device gpu`` each worker gets its own GPU and
they talk through NCCL (one rank per GPU: a one-GPU machine runs one rank, which still goes
through NCCL's collectives), and the one-process reference trains on the GPU too. Every step's
loss is copied to the host (``.item()``), which waits for the step: the loop times are
synchronized. MirroredStrategy runs on logical CPU devices, so the GPU mode leaves it out.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

from edu_dl.bench.device import Device
from edu_dl.bench.report import Benchmark, Json, Refused, Report, pyplot
from edu_dl.util.args import positive_int
from edu_dl.util.tables import markdown_table

SYNCED = ("each step's loss is copied to the host (.item()), which waits for the step, so the "
          "loop times count the GPU's work")


@dataclass
class Row:
    """One line of the table: a way of training and what it cost."""

    run: str
    workers: int
    rows_each: int
    ms_per_step: float  # the training loop only
    total_s: float  # with process start-up, rendezvous and (for TF) its import
    final_loss: float
    rel_diff: float  # max relative difference of the final weights from one process
    losses: list[float]


def parallel_flags(p: argparse.ArgumentParser) -> None:
    """``edu-dl bench parallel``'s own flags: --world-size, --steps, --backend and --no-tf."""
    p.add_argument("--world-size", type=positive_int, default=None,
                   help="workers (default 2; with --device gpu one per GPU, at most 2)")
    p.add_argument("--steps", type=positive_int, default=None, help="SGD steps (default 20)")
    p.add_argument("--backend", choices=("gloo", "nccl"), default=None,
                   help="default: nccl with one GPU per worker, else gloo")
    p.add_argument("--no-tf", action="store_true", help="skip MirroredStrategy")


def measure_parallel(args: argparse.Namespace, device: Device) -> Report:
    """Run ``edu-dl bench parallel``: the same SGD steps on one worker, with all_reduce, with DDP
    and (on the CPU, unless --no-tf) TensorFlow's MirroredStrategy, each compared with the single
    run; Refused when the batch does not split over the workers."""
    from tqdm.auto import tqdm

    from edu_dl.parallel import (
        make_problem,
        max_rel_diff,
        mirrored_strategy_demo,
        pitfalls,
        train_data_parallel,
        train_single,
    )

    on_gpu = device.runs_on == "gpu"
    world_size = args.world_size or (_gpus_for_ranks() if on_gpu else 2)
    backend = args.backend or ("nccl" if on_gpu else None)
    steps = args.steps or (5 if args.quick else 20)
    problem = make_problem()
    if problem.batch_size % world_size:
        raise Refused(f"error: the batch of {problem.batch_size} rows does not split over "
                      f"{world_size} workers; choose a divisor of it")
    names = ["single", "all_reduce", "ddp"] + ([] if args.no_tf or device.kind == "gpu"
                                               else ["mirrored"])
    rows: list[Row] = []
    single = parallel = None
    for name in tqdm(names, desc="bench parallel", disable=args.no_progress, file=sys.stderr):
        if name == "mirrored":
            m = mirrored_strategy_demo(problem, replicas=world_size, steps=steps)
            workers, rows_each, losses = m.num_replicas_in_sync, m.rows_per_replica[0], m.losses
            seconds, wall, weights = m.seconds, m.wall_seconds, m.weights
        else:
            if name == "single":
                result = single = train_single(problem, steps=steps, device=device.torch)
            else:
                result = train_data_parallel(problem, world_size=world_size, steps=steps,
                                             mode=name, backend=backend)
                parallel = parallel or result
            workers, rows_each, losses = (result.world_size, result.rows_per_rank[0],
                                          result.global_losses)
            seconds, wall, weights = result.seconds, result.wall_seconds, result.weights
        assert single is not None  # "single" runs first: everything is compared with it
        rows.append(Row(name, workers, rows_each, seconds / steps * 1e3, wall, float(losses[-1]),
                        max_rel_diff(weights, single.weights), [float(v) for v in losses]))
    return parallel_report(rows, table(rows, steps, device) + "\n" + pitfalls(parallel, single)
                           + "\n")


PARALLEL = Benchmark(
    "parallel", "data parallelism: torch.distributed workers and MirroredStrategy vs one process",
    "Train the lecture's two-layer net (float64) on one process with the whole batch, on R "
    "torch.distributed workers with N/R rows each (gradients averaged by hand with all_reduce, "
    "then by DistributedDataParallel), and with TensorFlow's MirroredStrategy on R logical CPUs; "
    "show that the weights agree and what it cost.",
    measure_parallel, flags=parallel_flags, files=("parallel.json", "parallel.png"),
    quick="5 steps: checks that it runs",
    device_help="cpu: gloo workers (default); gpu: one GPU per worker over NCCL, or one sentence "
    "and status 1 without a GPU")


def _gpus_for_ranks() -> int:
    """One rank per GPU, at most 2 (the lecture's R)."""
    import torch

    return max(1, min(2, torch.cuda.device_count()))


def table(rows: list[Row], steps: int, device: Device | None = None) -> str:
    """A Markdown table: one line per way of training (and the device, when known)."""
    out = [f"Data parallelism, {steps} SGD steps, float64 (times from this machine):", ""]
    if device is not None:
        timing = SYNCED if device.runs_on == "gpu" else device.synced
        out += [f"Device: {device.label}; {timing}.", ""]
    out += markdown_table(
        ["run", "workers", "rows each", "ms/step (loop)", "total s (with start-up)", "final loss",
         "weights vs one process"],
        [[r.run, str(r.workers), str(r.rows_each), f"{r.ms_per_step:.3g}", f"{r.total_s:.3g}",
          f"{r.final_loss:.6g}", f"{r.rel_diff:.1e}"] for r in rows],
        [False, *[True] * 6])
    return "\n".join(out) + "\n"


def parallel_report(rows: list[Row], text: str) -> Report:
    """The report, parallel.json (the rows) and parallel.png (loss curves, each run's cost)."""
    return Report(text, json={"parallel.json": Json([vars(r) for r in rows], indent=2,
                                                    newline=True)},
                  plots={"parallel.png": lambda path: plot_parallel(rows, path)})


def plot_parallel(rows: list[Row], path: Path) -> None:
    """Draw each run's loss per step (log scale) and its seconds, total and training loop, into
    the PNG ``path``."""
    plt = pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    for r, style in zip(rows, ["-", "--", ":", "-."]):
        left.plot(range(1, len(r.losses) + 1), r.losses, style, label=f"{r.run} (x{r.workers})")
    left.set_yscale("log")
    left.set_xlabel("step")
    left.set_ylabel("full-batch loss")
    left.set_title("Same losses, step for step")
    left.legend()
    names = [r.run for r in rows]
    right.bar(names, [r.total_s for r in rows], color="tab:gray", label="total (with start-up)")
    right.bar(names, [r.ms_per_step * len(r.losses) / 1e3 for r in rows], color="tab:blue",
              label="training loop")
    right.set_ylabel("seconds")
    right.set_title("What the extra processes cost")
    right.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
