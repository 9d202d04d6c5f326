"""Exercise 2, CPU vs GPU: FLOP rates, peak memory bandwidth, arithmetic intensity, and ``xp``.

Judged outside the sandbox: every value against its formula; for softmax_xp also the submitted
source (it takes its namespace from ``get_xp`` and never names NumPy), read with ``compile()``.
The in-sandbox check of the same names on ``fn.__code__`` is check()'s feedback only. The private
half: formulas, hidden cases and mistake replays; the call and the source check are public
(``edu_dl.harness.ex02``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from edu_dl.grading.authoring.hints import Mistake, Scaled, SumsTo
from edu_dl.grading.authoring.source import all_checks, names_check, speed_rules
from edu_dl.grading.authoring.spec import Part, tolerance
from edu_dl.harness.ex02 import INTENSITY_SOURCE, XP_SOURCE, call_device_agnostic
from edu_dl.speed.tasks import CALLS_THE_REFERENCE, TASKS

Case = tuple[Any, ...]
EXACT = tolerance(rtol=1e-9, atol=0.0)
RATIO = 1e-9  # a hint's factor, to 1e-9 relative


def _ratio(factor: float, message: str) -> Scaled:
    """got == factor * expected, to 1e-9 relative."""
    return Scaled(message, factor=factor, rtol=RATIO)


def _times(factor: Callable[[Case], float], message: str) -> Mistake:
    """got == factor(args) * expected, to 1e-9 relative (a factor that depends on the case)."""
    return Mistake(lambda e, a: factor(a) * float(e), message, rtol=RATIO, atol=0.0)


# --------------------------------------------------------------------------- GFLOP/s


def _gflops_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    cases: list[Case] = [(1000, 0.05), (4096, 1.25)]
    if hidden:
        cases = [(int(rng.integers(64, 8192)), float(rng.uniform(1e-3, 5.0))) for _ in range(4)]
    return cases


def _gflops(n: int, seconds: float) -> float:
    """An nxn matmul does n³ multiply-adds = 2 n³ floating-point operations."""
    return 2.0 * n**3 / seconds / 1e9


# --------------------------------------------------------------------------- bandwidth


def _bandwidth_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    # The source's example first: DDR4-2933 (1466.67 MHz, two transfers a clock), 8 B, 4 channels.
    cases: list[Case] = [(2933.34, 8, 4), (3200.0, 8, 2)]
    if hidden:
        cases = [(float(rng.choice([2133.0, 2666.0, 4800.0, 6400.0])), 8,
                  int(rng.integers(1, 9))) for _ in range(3)]
    return cases


def _bandwidth(mega_transfers_per_s: float, bus_width_bytes: int, channels: int) -> float:
    """Peak MB/s = MT/s x bytes per transfer x channels."""
    return mega_transfers_per_s * bus_width_bytes * channels


# --------------------------------------------------------------------------- intensity


def _intensity_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    cases: list[Case] = [(1024, 4), (100, 8)]
    if hidden:
        cases = [(int(rng.integers(2, 10000)), int(rng.choice([2, 4, 8]))) for _ in range(3)]
    return cases


def _intensity(n: int, itemsize: int) -> float:
    """2 n³ FLOPs over 3 n² elements moved (read A and B, write C) of ``itemsize`` bytes."""
    return 2.0 * n**3 / (3 * n**2 * itemsize)


# --------------------------------------------------------------------------- xp


def _softmax_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    shapes = [(2, 3), (4, 5)] if not hidden else [
        tuple(int(d) for d in rng.integers(1, 7, size=2)) for _ in range(3)]
    return [(3.0 * rng.standard_normal(s),) for s in shapes]


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


# --------------------------------------------------------------------------- going further

# The answers only: the speed itself is measured by the grader, from outside, in separate
# sandboxed runs (edu_dl.grading.stages.speed); the written justification is graded by hand.
FASTER = TASKS["ex02.faster_standardize"]


def _standardize_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    sizes = [4, 7] if not hidden else [int(s) for s in rng.integers(3, 12, size=3)]
    return [FASTER.inputs(rng, size) for size in sizes]


N_CUBED = "an nxn matmul computes n² dot products of length n: n³ multiply-adds, not n²"


PARTS = [
    Part(
        id="ex02.gflops", points=1, cases=_gflops_cases, expected=_gflops, compare=EXACT,
        arg_names=("n", "seconds"),
        hints=(
            _ratio(0.5, "half the expected rate: count a multiply-add as 2 FLOPs (2 n³ per "
                        "product)"),
            _ratio(1e9, "GFLOP/s is 1e9 FLOP/s: divide by 1e9"),
            _times(lambda a: 1 / a[0], N_CUBED),
            _times(lambda a: 0.5 / a[0], N_CUBED),
        ),
    ),
    Part(
        id="ex02.peak_bandwidth", points=1, cases=_bandwidth_cases, expected=_bandwidth,
        compare=EXACT, arg_names=("mega_transfers_per_s", "bus_width_bytes", "channels"),
        hints=(
            _ratio(8.0, "the bus width is already in bytes (8 B = 64 bits): do not multiply by 8"),
            _ratio(2.0, "MT/s already counts both transfers per clock (DDR): do not double it "
                        "again"),
            _times(lambda a: 1 / a[2], "multiply by the number of channels: each channel has "
                                       "its own bus"),
        ),
    ),
    Part(
        id="ex02.matmul_intensity", points=1, cases=_intensity_cases, expected=_intensity,
        compare=EXACT, arg_names=("n", "itemsize"), source_check=INTENSITY_SOURCE,
        hints=(
            _ratio(0.5, "count 2 n³ FLOPs (a multiply and an add per term)"),
            _ratio(1.5, "a matmul moves three matrices: reads A and B, writes C (3 n² elements)"),
            _times(lambda a: a[1], "divide by the bytes moved, not the elements: multiply the "
                                   "elements by itemsize"),
        ),
    ),
    Part(
        id="ex02.softmax_xp", points=2, cases=_softmax_cases, expected=_softmax,
        call=call_device_agnostic, source_check=XP_SOURCE, arg_names=("x",),
        hints=(SumsTo("normalize each row (axis=-1, keepdims=True), not each column",
                      total=1.0, axis=0),),
    ),
    Part(
        id=FASTER.part_id, points=1, cases=_standardize_cases, expected=FASTER.reference,
        compare=tolerance(rtol=FASTER.rtol, atol=FASTER.atol), arg_names=("images",),
        source_check=all_checks(names_check(forbidden=[((FASTER.reference.__name__,),
                                                         CALLS_THE_REFERENCE)]), speed_rules),
    ),
]
