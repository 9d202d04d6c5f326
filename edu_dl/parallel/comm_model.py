"""The alpha-beta model of communication, fitted to all-reduce times measured with gloo.

Sending n bytes costs t = alpha + n * beta: a fixed latency alpha (start-up, synchronisation,
the network stack) plus n times the seconds per byte, beta = 1 / bandwidth. A ring all-reduce
over R devices sends 2 (R - 1) / R * n bytes from each, so the model predicts
t(n) = alpha + 2 (R - 1) / R * n * beta. Small messages cost about alpha whatever their size,
large ones grow with n: the reason DDP packs gradients into buckets of megabytes.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.distributed as dist

from edu_dl.parallel.launch import run_workers

FLOAT32_BYTES = 4


def ring_factor(world_size: int) -> float:
    """The bytes each device sends in a ring all-reduce, per byte of the message: 2 (R - 1) / R."""
    if world_size < 1:
        raise ValueError(f"world_size must be at least 1, got {world_size}")
    return 2.0 * (world_size - 1) / world_size


@dataclass(frozen=True)
class AlphaBeta:
    """t(n) = alpha + ring_factor(R) * n * beta, for an all-reduce of n bytes over R devices."""

    alpha: float  # seconds
    beta: float  # seconds per byte sent
    world_size: int

    def predict(self, n_bytes: float | np.ndarray) -> float | np.ndarray:
        return self.alpha + ring_factor(self.world_size) * np.asarray(n_bytes) * self.beta

    @property
    def bandwidth(self) -> float:
        """Bytes per second, 1 / beta."""
        return 1.0 / self.beta if self.beta > 0 else float("inf")

    @property
    def half_size(self) -> float:
        """The message size whose latency and bandwidth terms are equal (n_1/2)."""
        return self.alpha / (ring_factor(self.world_size) * self.beta) if self.beta > 0 else 0.0


def fit_alpha_beta(sizes: Sequence[float], seconds: Sequence[float], world_size: int) -> AlphaBeta:
    """Least squares on RELATIVE errors (the sizes span decades), alpha and beta kept >= 0."""
    n = np.asarray(sizes, dtype=np.float64) * ring_factor(world_size)
    t = np.asarray(seconds, dtype=np.float64)
    if n.shape != t.shape or len(t) < 2 or np.any(t <= 0):
        raise ValueError("need at least two sizes with positive times, as many times as sizes")
    design = np.stack([np.ones_like(n), n], axis=1) / t[:, None]
    (alpha, beta), *_ = np.linalg.lstsq(design, np.ones_like(t), rcond=None)
    if alpha < 0:  # the latency is too small to see: fit the bandwidth term alone
        alpha, beta = 0.0, float(np.sum(n / t) / np.sum((n / t) ** 2))
    elif beta < 0:  # the sizes are too small to see the bandwidth: a constant
        alpha, beta = float(len(t) / np.sum(1.0 / t)), 0.0
    return AlphaBeta(alpha=float(alpha), beta=float(beta), world_size=world_size)


@dataclass
class AllReduceTimes:
    """Seconds of each all-reduce, per message size (bytes), one sample per round."""

    sizes: list[int]
    samples: dict[int, list[float]]
    world_size: int

    def medians(self) -> list[float]:
        return [statistics.median(self.samples[n]) for n in self.sizes]


def _all_reduce_timing_worker(
    rank: int,
    world_size: int,
    device: torch.device,
    sizes: list[int],
    rounds: int,
    calls: int,
) -> dict[int, list[float]]:
    """Seconds per all-reduce (sum) of each size: ``calls`` in a row, one sample per round.

    The sizes take turns in a new order every round (the same on every rank: one seed per
    round), so no size always follows the largest one, and a load that comes and goes falls on
    all sizes alike.
    """
    buffers = {n: torch.ones(n // FLOAT32_BYTES, dtype=torch.float32, device=device) for n in sizes}
    for buffer in buffers.values():  # warm-up: gloo sets up its pairs and scratch buffers
        dist.all_reduce(buffer)
    times: dict[int, list[float]] = {n: [] for n in sizes}
    for round_index in range(rounds):
        for i in np.random.default_rng(round_index).permutation(len(sizes)):
            n = sizes[i]
            dist.barrier()  # all ranks start together: time the collective, not the wait
            start = time.perf_counter()
            for _ in range(calls):
                dist.all_reduce(buffers[n])
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            times[n].append((time.perf_counter() - start) / calls)
    return times


def measure_all_reduce(
    sizes: Sequence[int],
    world_size: int = 2,
    rounds: int = 9,
    calls: int = 5,
    backend: str | None = "gloo",
    timeout_s: float = 120.0,
) -> AllReduceTimes:
    """All-reduce float32 messages of these sizes (bytes, multiples of 4) on R processes.

    A sample is the mean of ``calls`` all-reduces in a row, as the slower rank timed them: the
    collective ends for everyone only when the last rank has its result.
    """
    sizes = [int(n) for n in sizes]
    if any(n < FLOAT32_BYTES or n % FLOAT32_BYTES for n in sizes):
        raise ValueError(f"message sizes must be positive multiples of 4 bytes, got {sizes}")
    per_rank = run_workers(
        _all_reduce_timing_worker,
        world_size,
        args=(sizes, rounds, calls),
        backend=backend,
        timeout_s=timeout_s,
    )
    samples = {n: [max(ts) for ts in zip(*(r[n] for r in per_rank))] for n in sizes}
    return AllReduceTimes(sizes=sizes, samples=samples, world_size=world_size)
