"""Tensor parallelism (Megatron-LM style): one layer's matmuls split over R processes.

The block is y = relu(x @ w1) @ w2. ``w1`` is split by COLUMNS: rank r computes only its hidden
units, h_r = relu(x @ w1[:, cols_r]); relu acts on each unit alone, so no communication is needed
yet. ``w2`` is split by ROWS (the same hidden units): rank r can only form the partial product
h_r @ w2[cols_r, :], a sum over ITS hidden units. The full y is the sum of the ranks' partials, so
the one all-reduce of the block goes after the row-split matmul. Every rank starts with the whole x
and ends with the whole y, and holds 1/R of each weight matrix.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
import torch
import torch.distributed as dist

from edu_dl.parallel.launch import run_workers


@dataclass
class TensorParallelResult:
    """What the ranks give back, every array NumPy, indexed by rank."""

    outputs: list[np.ndarray]  # y on each rank after the all-reduce
    partials: list[np.ndarray]  # each rank's h_r @ w2_r, before the all-reduce
    hidden_columns: list[tuple[int, int]]  # [start, stop) of the hidden units each rank owns
    weight_elements: list[int]  # how many elements of w1 and w2 each rank holds
    pids: list[int]  # the process that ran each rank


def hidden_split(hidden: int, world_size: int, rank: int) -> tuple[int, int]:
    """[start, stop) of rank's hidden units: contiguous blocks of nearly equal size."""
    units = np.array_split(np.arange(hidden), world_size)[rank]
    return int(units[0]), int(units[-1]) + 1


def mlp(x: np.ndarray, w1: np.ndarray, w2: np.ndarray) -> np.ndarray:
    """The block in one process: relu(x @ w1) @ w2."""
    return np.asarray(np.maximum(x @ w1, 0.0) @ w2)


def _tensor_parallel_worker(
    rank: int,
    world_size: int,
    device: torch.device,
    x: np.ndarray,
    w1: np.ndarray,
    w2: np.ndarray,
) -> dict[str, object]:
    """One rank of y = relu(x @ w1) @ w2, with w1 split by columns and w2 by rows."""
    start, stop = hidden_split(w1.shape[1], world_size, rank)
    w1_r = torch.tensor(w1[:, start:stop], device=device)  # column split: its hidden units
    w2_r = torch.tensor(w2[start:stop, :], device=device)  # row split: the same hidden units
    h_r = torch.relu(torch.tensor(x, device=device) @ w1_r)  # no communication: relu is per unit
    partial = h_r @ w2_r  # a sum over this rank's hidden units only
    y = partial.clone()
    dist.all_reduce(y, op=dist.ReduceOp.SUM)  # the block's one all-reduce: sum the partial sums
    return {
        "y": y.cpu().numpy(),
        "partial": partial.cpu().numpy(),
        "columns": (start, stop),
        "elements": w1_r.numel() + w2_r.numel(),
        "pid": os.getpid(),
    }


def tensor_parallel_mlp(
    x: np.ndarray,
    w1: np.ndarray,
    w2: np.ndarray,
    world_size: int = 2,
    backend: str | None = None,
    timeout_s: float = 120.0,
) -> TensorParallelResult:
    """Run the block on ``world_size`` processes: w1 split by columns, w2 by rows."""
    if w1.shape[1] != w2.shape[0] or x.shape[1] != w1.shape[0]:
        raise ValueError(f"shapes do not chain: x {x.shape}, w1 {w1.shape}, w2 {w2.shape}")
    if w1.shape[1] < world_size:
        raise ValueError(f"{w1.shape[1]} hidden units cannot be split over {world_size} ranks")
    results = run_workers(
        _tensor_parallel_worker,
        world_size,
        args=(x, w1, w2),
        backend=backend,
        timeout_s=timeout_s,
    )
    return TensorParallelResult(
        outputs=[r["y"] for r in results],
        partials=[r["partial"] for r in results],
        hidden_columns=[r["columns"] for r in results],
        weight_elements=[r["elements"] for r in results],
        pids=[r["pid"] for r in results],
    )
