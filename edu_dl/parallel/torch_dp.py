"""Data-parallel SGD with ``torch.distributed``: R processes, each with N/R rows of the batch.

Every step each worker computes the gradient g_r of its shard's mean loss, then all workers
average them, g = (1/R) * sum_r g_r, and apply the same update w <- w - lr * g. With a mean loss
and equal shards, g is exactly the full-batch gradient, so R workers follow one process with
the whole batch step for step (up to the order of floating-point sums).

Two ways to average: by hand with ``dist.all_reduce`` (sum, then divide by R), or with
``DistributedDataParallel``, which does the same in buckets while backward is still running.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from tqdm.auto import tqdm

from edu_dl.parallel.launch import choose_backend, run_workers
from edu_dl.parallel.problem import (
    LR,
    TwoLayerNet,
    TwoLayerProblem,
    make_problem,
    mean_row_sum_loss,
)

Mode = Literal["all_reduce", "ddp"]
MODES: tuple[str, ...] = ("all_reduce", "ddp")


@dataclass
class ParallelResult:
    """What one training run gives back; every array is NumPy on the host."""

    weights: list[np.ndarray]  # [w1, w2] after the last step (rank 0's; all ranks agree)
    losses: np.ndarray  # (world_size, steps): each rank's loss on its own shard
    global_losses: np.ndarray  # (steps,): the mean over ranks = the full-batch loss
    rows_per_rank: list[int]  # how many batch rows each rank saw per step
    seconds: float  # the training loop, slowest rank (no start-up)
    wall_seconds: float  # everything, with process start-up and rendezvous
    world_size: int = 1
    backend: str = "none"
    mode: str = "single"
    rank_weights: list[list[np.ndarray]] = field(default_factory=list)  # [rank][w1, w2]
    pids: list[int] = field(default_factory=list)  # the process that ran each rank


def _step_all_reduce(model: torch.nn.Module, world_size: int) -> None:
    """g <- (1/R) * sum_r g_r for every parameter: gloo has no AVG, so SUM then divide."""
    for p in model.parameters():
        assert p.grad is not None
        dist.all_reduce(p.grad, op=dist.ReduceOp.SUM)
        p.grad /= world_size


def _train_worker(
    rank: int,
    world_size: int,
    device: torch.device,
    problem: TwoLayerProblem,
    steps: int,
    lr: float,
    mode: str,
    progress: bool,
) -> dict[str, object]:
    """One rank's training loop: its shard, its replica, averaged gradients, SGD."""
    x_np, y_np = problem.shard(rank, world_size)
    x, y = torch.tensor(x_np, device=device), torch.tensor(y_np, device=device)
    model: torch.nn.Module = TwoLayerNet(problem.w1, problem.w2).to(device)
    if mode == "ddp":
        # DDP broadcasts rank 0's weights at construction and all-reduces gradients in backward.
        model = DistributedDataParallel(
            model, device_ids=[device.index] if device.type == "cuda" else None
        )
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    losses, global_losses = [], []
    dist.barrier()  # start the clock together: time the training, not the start-up
    start = time.perf_counter()
    for _ in tqdm(
        range(steps),
        desc=f"{mode} x{world_size}",
        disable=not (progress and rank == 0),
        file=sys.stderr,
    ):
        loss = mean_row_sum_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        if mode == "all_reduce":
            _step_all_reduce(model, world_size)
        optimizer.step()
        total = loss.detach().clone()
        dist.all_reduce(total, op=dist.ReduceOp.SUM)  # mean of shard means = full-batch loss
        losses.append(loss.item())
        global_losses.append(total.item() / world_size)
    seconds = time.perf_counter() - start
    net = model.module if isinstance(model, DistributedDataParallel) else model
    return {
        "weights": [p.detach().cpu().numpy() for p in net.parameters()],
        "losses": losses,
        "global_losses": global_losses,
        "rows": int(x.shape[0]),
        "seconds": seconds,
        "pid": os.getpid(),
    }


def train_data_parallel(
    problem: TwoLayerProblem | None = None,
    *,
    world_size: int = 2,
    steps: int = 10,
    lr: float = LR,
    mode: Mode = "all_reduce",
    backend: str | None = None,
    timeout_s: float = 120.0,
    progress: bool = False,
) -> ParallelResult:
    """Train on ``world_size`` processes, each with N / world_size rows; gradients averaged.

    ``mode``: 'all_reduce' (by hand) or 'ddp' (DistributedDataParallel). ``backend``: 'gloo',
    'nccl' or None (NCCL when there is one GPU per worker, else gloo).
    """
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; choose from {', '.join(MODES)}")
    problem = problem if problem is not None else make_problem()
    problem.shard(0, world_size)  # fail here, in the parent, if the batch does not split
    start = time.perf_counter()
    chosen = choose_backend(backend, world_size)
    results = run_workers(
        _train_worker,
        world_size,
        args=(problem, steps, lr, mode, progress),
        backend=chosen,
        timeout_s=timeout_s,
    )
    return ParallelResult(
        weights=results[0]["weights"],
        losses=np.array([r["losses"] for r in results]),
        global_losses=np.array(results[0]["global_losses"]),
        rows_per_rank=[r["rows"] for r in results],
        seconds=max(r["seconds"] for r in results),
        wall_seconds=time.perf_counter() - start,
        world_size=world_size,
        backend=chosen,
        mode=mode,
        rank_weights=[r["weights"] for r in results],
        pids=[r["pid"] for r in results],
    )


def train_single(
    problem: TwoLayerProblem | None = None,
    *,
    steps: int = 10,
    lr: float = LR,
    device: str = "cpu",
    progress: bool = False,
) -> ParallelResult:
    """The reference: one process, the whole batch, plain SGD on ``device`` ('cpu' or 'cuda')."""
    problem = problem if problem is not None else make_problem()
    start = time.perf_counter()
    dev = torch.device(device)
    x, y = torch.tensor(problem.X, device=dev), torch.tensor(problem.Y, device=dev)
    model = TwoLayerNet(problem.w1, problem.w2).to(dev)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    losses = []
    loop_start = time.perf_counter()
    for _ in tqdm(range(steps), desc="single", disable=not progress, file=sys.stderr):
        loss = mean_row_sum_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    end = time.perf_counter()
    weights = [p.detach().cpu().numpy() for p in model.parameters()]
    return ParallelResult(
        weights=weights,
        losses=np.array([losses]),
        global_losses=np.array(losses),
        rows_per_rank=[problem.batch_size],
        seconds=end - loop_start,
        wall_seconds=end - start,
        rank_weights=[weights],
        pids=[os.getpid()],
    )
