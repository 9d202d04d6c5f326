"""The open-ended speed tasks: each a given slow reference, the inputs of one call and a goal ratio.

A task states a goal, never a recipe: "the same answer, ``goal`` times less CPU time than the
reference". Inputs are drawn from a seed (the grading secret's, in the grader), fresh arrays for
every call, so that a submission cannot answer from a cache of earlier calls.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

Inputs = tuple[Any, ...]


def standardize_reference(images: np.ndarray) -> np.ndarray:
    """Per-channel standardization: uint8 (N, H, W, C) to float32 (N, C, H, W),
    out[n, c] = (images[n, :, :, c] - mean_c) / std_c over the whole batch."""
    n, h, w, c = images.shape
    out = np.empty((n, c, h, w), dtype=np.float32)
    for channel in range(c):
        values = images[..., channel].astype(np.float64)
        mean, std = values.mean(), values.std()
        for i in range(n):
            for row in range(h):
                for col in range(w):
                    out[i, channel, row, col] = (images[i, row, col, channel] - mean) / std
    return out


def standardize_inputs(rng: np.random.Generator, size: int = 32, *,
                       pool: NormalPool | None = None) -> Inputs:
    """One call's images: a batch of 8 RGB images of size x size pixels, std > 0 per channel."""
    return (rng.integers(0, 256, size=(8, size, size, 3), dtype=np.uint8),)


def sgd_step_reference(X: np.ndarray, y: np.ndarray, W: np.ndarray, lr: float = 0.1
                       ) -> np.ndarray:
    """One SGD step of softmax regression: W - lr * mean_i x_i (softmax(x_i W) - onehot(y_i))."""
    grad = np.zeros_like(W)
    for i in range(X.shape[0]):
        scores = X[i] @ W
        p = np.exp(scores - scores.max())
        p /= p.sum()
        p[y[i]] -= 1.0
        grad += np.outer(X[i], p)
    return W - lr * grad / X.shape[0]


class NormalPool:
    """Standard normal numbers drawn once per seed, of which a call takes a window.

    A call's block is a copy of the pool's numbers from an offset its own stream draws: as
    normal as a fresh draw and a new array every call. Exercise 08's 1,600 calls once drew
    26 M numbers, 0.25 s of the 0.42 s its submission runs spent drawing inputs; with the pool
    (0.01 s, once per run), each call's inputs drawn as it is called, 0.07 s (2026-12-04)."""

    SIZE = 1 << 20

    def __init__(self, seed: int) -> None:
        # the seed's root stream; every call draws from one of its children (call_input)
        rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence(seed)))
        self.values = rng.standard_normal(self.SIZE)

    def normal(self, rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
        """A fresh (shape) array of standard normal numbers: the window at rng's offset."""
        size = math.prod(shape)
        start = int(rng.integers(0, self.SIZE - size + 1))
        return self.values[start:start + size].reshape(shape).copy()


@functools.lru_cache(maxsize=4)
def normal_pool(seed: int) -> NormalPool:
    """The seed's pool, drawn once per process."""
    return NormalPool(seed)


def sgd_step_inputs(rng: np.random.Generator, batch_size: int = 256, *,
                    pool: NormalPool | None = None) -> Inputs:
    """One call's batch: X (batch_size, 64), labels y among 10 classes, weights W (64, 10).
    X is a window of ``pool`` where one is given (the timed calls), else drawn from rng."""
    shape = (batch_size, 64)
    X = pool.normal(rng, shape) if pool is not None else rng.standard_normal(shape)
    return X, rng.integers(0, 10, size=batch_size), 0.1 * rng.standard_normal((64, 10))


def max_pool_reference(x: np.ndarray) -> np.ndarray:
    """2x2 max pooling with stride 2: (N, C, H, W) to (N, C, H // 2, W // 2)."""
    n, c, h, w = x.shape
    out = np.empty((n, c, h // 2, w // 2), dtype=x.dtype)
    for i in range(n):
        for channel in range(c):
            for row in range(h // 2):
                for col in range(w // 2):
                    window = x[i, channel, 2 * row:2 * row + 2, 2 * col:2 * col + 2]
                    out[i, channel, row, col] = window.max()
    return out


def max_pool_inputs(rng: np.random.Generator, size: int = 16, *,
                    pool: NormalPool | None = None) -> Inputs:
    """One call's activations: 8 images, 8 channels, size x size (size even)."""
    return (rng.standard_normal((8, 8, size, size)).astype(np.float32),)


def _channels_first(images: np.ndarray) -> tuple[int, ...]:
    n, h, w, c = images.shape
    return (n, c, h, w)


@dataclass(frozen=True)
class SpeedTask:
    """One open-ended task: make ``function`` at least ``goal`` times cheaper than ``reference``."""

    part_id: str
    function: str  # the name the student's function has
    reference: Callable[..., np.ndarray]
    inputs: Callable[..., Inputs]  # (rng, size=..., pool=...) -> one call's arguments
    output_shape: Callable[..., tuple[int, ...]]  # (one call's arguments) -> its answer's shape
    goal: float  # the ratio asked for (reference CPU time / submission CPU time)
    calls: int  # calls per timed run: the reference's run should cost about a CPU second
    rtol: float = 1e-5
    atol: float = 1e-5
    points: float = 2.0  # the speed row's: all of them at CREDIT_FRACTION x goal, none below


SPEED_ROW = ".speed"
# A speed part's source check: the answers of the reference itself would pass, and its speed
# run (the function alone, with np and math) would crash.
CALLS_THE_REFERENCE = ("write the function yourself: the slow reference is the code to beat, not "
                       "to call (the grader times your function alone, with np and math only)")


def speed_row(part_id: str) -> str:
    """The gradebook row of a task's measured speed, beside its correctness part ``part_id``."""
    return part_id + SPEED_ROW


TASKS: dict[str, SpeedTask] = {
    task.part_id: task
    for task in (
        # Lectures 1-6: a preprocessing step, vectorized.
        SpeedTask("ex02.faster_standardize", "standardize", standardize_reference,
                  standardize_inputs, _channels_first, goal=10.0, calls=100),
        # Lectures 7-16: a training step, batched instead of one sample at a time.
        SpeedTask("ex08.faster_sgd_step", "sgd_step", sgd_step_reference, sgd_step_inputs,
                  lambda X, y, W: W.shape, goal=10.0, calls=400),
        # Lectures 11 and 17: pooling without a Python loop per window.
        SpeedTask("ex11.faster_max_pool", "max_pool", max_pool_reference, max_pool_inputs,
                  lambda x: (*x.shape[:2], x.shape[2] // 2, x.shape[3] // 2), goal=10.0,
                  calls=150),
    )
}


def call_input(task: SpeedTask, seed: int, index: int) -> Inputs:
    """The arguments of call ``index``, drawn from the seed's ``index``-th child stream (as
    ``SeedSequence(seed).spawn`` numbers them): any one call's inputs can be drawn alone, so a
    spot check of 8 calls among 1,600 draws 8 (exercise 08's 1,600 cost 0.07 s of CPU)."""
    bits = np.random.PCG64(np.random.SeedSequence(seed, spawn_key=(index,)))
    return task.inputs(np.random.Generator(bits), pool=normal_pool(seed))


def call_inputs(task: SpeedTask, seed: int, calls: int) -> list[Inputs]:
    """The arguments of each of ``calls`` calls, drawn from ``seed``: the same in every run."""
    return [call_input(task, seed, index) for index in range(calls)]


def indicative_ratio(task: SpeedTask, function: Callable[..., Any], calls: int = 5,
                     seed: int = 0) -> float:
    """INDICATIVE ONLY: reference / function process time, measured the simple way, in this
    process. The grade is measured by the grader, from outside, in separate sandboxed runs."""
    inputs = call_inputs(task, seed, calls)

    def cost(f: Callable[..., Any]) -> float:
        best = float("inf")
        for _ in range(3):  # best of three: a busy machine only ever adds time
            start = time.process_time()
            for args in inputs:
                f(*args)
            best = min(best, time.process_time() - start)
        return best

    return cost(task.reference) / max(cost(function), 1e-6)


def show_indicative_ratio(part_id: str, function: Callable[..., Any], calls: int = 3) -> float:
    """Print (and return) the indicative ratio of ``function`` for a task, labelled as such."""
    task = TASKS[part_id]
    try:
        ratio = indicative_ratio(task, function, calls)
    except NotImplementedError:  # the released stub: nothing to time yet, and no error cell
        print(f"{task.function} is not implemented yet: nothing to time.")
        return float("nan")
    print(f"Indicative only: {ratio:.1f}x less CPU time than the reference here (goal "
          f"{task.goal:g}x), timed the simple way in this process. Your grade is measured by "
          "the grader, outside your code, on other inputs.")
    return ratio
