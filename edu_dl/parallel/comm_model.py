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
from collections.abc import Mapping, Sequence
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


def _fit_weighted(n: np.ndarray, t: np.ndarray, w: np.ndarray) -> tuple[float, float]:
    """alpha, beta >= 0 minimising sum w * ((alpha + n * beta) / t - 1) ** 2 (relative errors)."""
    root = np.sqrt(w)
    design = np.stack([root / t, root * n / t], axis=1)
    norms = np.linalg.norm(design, axis=0)
    norms[norms == 0] = 1.0  # a column of zeros (R = 1: nothing is sent) stays zero
    scaled, *_ = np.linalg.lstsq(design / norms, root, rcond=None)
    alpha, beta = scaled / norms
    if alpha >= 0 and beta >= 0:
        return float(alpha), float(beta)
    # One term is too small to see: the better of the two one-term fits.
    u, v = design[:, 0], design[:, 1]
    only_alpha = (float(u @ root / (u @ u)), 0.0)
    only_beta = (0.0, float(v @ root / (v @ v))) if v @ v > 0 else only_alpha

    def loss(ab: tuple[float, float]) -> float:
        return float(np.sum(w * ((ab[0] + n * ab[1]) / t - 1) ** 2))

    return min(only_alpha, only_beta, key=loss)


# Tukey's biweight: a size whose relative error is beyond TUKEY_C robust standard deviations of
# all the sizes' errors gets no weight at all (a size where gloo switches algorithm, or a burst of
# load on a shared machine); 4.685 keeps 95% of the efficiency of least squares on clean data.
TUKEY_C = 4.685
MIN_SCALE = 0.01  # relative errors below 1% are as good as exact: no weight is cut for them


def fit_alpha_beta(
    sizes: Sequence[float], seconds: Sequence[float], world_size: int, robust: bool = True
) -> AlphaBeta:
    """Fit t(n) = alpha + ring_factor(R) * n * beta to times of messages of n bytes.

    The errors are RELATIVE (the sizes span decades: an absolute fit would see only the largest),
    and alpha and beta are kept >= 0. With ``robust`` (the default), the least-squares fit is
    then refitted with Tukey's biweights (iteratively reweighted least squares), so that a few
    sizes far from the rest cannot drag both numbers: the fit follows the majority of the sizes.
    Give one time per size (a median) or several (every sample): the sizes may repeat.
    """
    n = np.asarray(sizes, dtype=np.float64) * ring_factor(world_size)
    t = np.asarray(seconds, dtype=np.float64)
    if n.shape != t.shape or n.ndim != 1 or len(t) < 2 or np.any(t <= 0) or np.any(n < 0):
        raise ValueError("need at least two sizes with positive times, as many times as sizes")
    alpha, beta = _fit_weighted(n, t, np.ones_like(t))
    if not robust:
        return AlphaBeta(alpha=alpha, beta=beta, world_size=world_size)
    # Start from the least ABSOLUTE relative errors (reweighted least squares, weights 1 / |error|),
    # which a few wild sizes cannot drag far, then let the biweights drop what is still far off.
    for _ in range(30):
        errors = (alpha + n * beta) / t - 1
        alpha, beta = _fit_weighted(n, t, 1 / np.maximum(np.abs(errors), 1e-6))
    for _ in range(50):
        errors = (alpha + n * beta) / t - 1
        scale = max(1.4826 * float(np.median(np.abs(errors))), MIN_SCALE)
        weights = np.clip(1 - (errors / (TUKEY_C * scale)) ** 2, 0, None) ** 2
        if np.count_nonzero(weights) < 2:
            break  # nothing left to fit: keep the last fit
        new = _fit_weighted(n, t, weights)
        if np.allclose(new, (alpha, beta), rtol=1e-9, atol=0):
            break
        alpha, beta = new
    return AlphaBeta(alpha=alpha, beta=beta, world_size=world_size)


# A model "predicts" the measured times if its time is within this factor of the median at every
# size: then its estimates of a bucketing (one message against many) are right to within it too.
MAX_FACTOR = 1.5


@dataclass(frozen=True)
class FitCheck:
    """How well a fitted model follows measured samples, size by size."""

    sizes: list[int]
    ratios: list[float]  # model / median, per size
    inside: list[bool]  # the model inside the measured middle half (first to third quartile)

    @property
    def inside_count(self) -> int:
        return sum(self.inside)

    @property
    def worst_size(self) -> int:
        """The size whose median the model misses by the largest factor."""
        return self.sizes[int(np.argmax([max(r, 1 / r) for r in self.ratios]))]

    @property
    def worst_ratio(self) -> float:
        """model / median at the worst size (below 1: the model is too fast there)."""
        return self.ratios[self.sizes.index(self.worst_size)]

    @property
    def worst_error(self) -> float:
        """|model / median - 1| at the worst size: 0.3 means 30% off the measured median."""
        return abs(self.worst_ratio - 1)

    @property
    def predicts(self) -> bool:
        """Within MAX_FACTOR of the median at every size."""
        return all(1 / MAX_FACTOR <= r <= MAX_FACTOR for r in self.ratios)

    def summary(self) -> str:
        """Two sentences: how well the model follows the samples, and what may be used of it."""
        ratio = self.worst_ratio
        side = "above" if ratio > 1 else "below"
        size = f"{self.worst_size:,}\u00a0B"  # a no-break space: a wrapped line keeps it whole
        text = (
            f"the model lies inside the measured middle half at {self.inside_count} of "
            f"{len(self.sizes)} sizes; it is furthest off at {size}, "
            f"{ratio:.2f}x the median ({self.worst_error:.0%} {side} it)."
        )
        if self.predicts:
            return text + (
                f" Within a factor of {MAX_FACTOR:g} of every median: good enough to estimate "
                "what messages of these sizes cost here."
            )
        off = sum(not 1 / MAX_FACTOR <= r <= MAX_FACTOR for r in self.ratios)
        return text + (
            f" More than a factor of {MAX_FACTOR:g} off at {off} of {len(self.sizes)} sizes: two "
            "numbers do not describe these measurements, so this fit's n_1/2 and its "
            "predictions are not this machine's costs."
        )


def check_fit(model: AlphaBeta, samples: Mapping[int, Sequence[float]]) -> FitCheck:
    """Compare a model with measured samples (seconds per size, as ``AllReduceTimes.samples``)."""
    sizes = sorted(samples)
    ratios, inside = [], []
    for n in sizes:
        low, median, high = np.quantile(np.asarray(samples[n], dtype=np.float64), [0.25, 0.5, 0.75])
        predicted = float(model.predict(n))
        ratios.append(predicted / median)
        inside.append(bool(low <= predicted <= high))
    return FitCheck(sizes=sizes, ratios=ratios, inside=inside)


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
