"""Exercise 4 (timing the GPU): how the stream timer is called and judged.

Public code, shipped with the package: the call adapter (the timer run against
:class:`edu_dl.gpu.timing.SimulatedAsyncDevice`, whose clock it is handed, with launches that
cost the host time, counting its launches, synchronizations and clock reads for check()'s
feedback), the timer's comparison (a window around the kernel's duration, which is the case's own
first argument), the source check that the timer synchronizes and reads its clock, and rules that
judge a number against the expected one. Nothing here computes an answer: the hidden cases and the
mistake replays stay in the private part file.

The timer runs on simulated time, not the machine's: nothing sleeps, so a timer measures exactly
what the simulation says and gets the same verdict and hint on a quiet and on a loaded machine.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from edu_dl.grading.authoring.hints import Rule
from edu_dl.grading.authoring.source import code_names, definition_node
from edu_dl.grading.authoring.spec import CheckFailure, Verdict

Case = tuple[Any, ...]


def as_float(value: Any) -> float:
    """One number of a result as a Python float."""
    return float(np.asarray(value).item())




# launch() itself costs the host this share of a kernel's time (Python and the driver): a timer
# that synchronizes after every launch counts it in every kernel; back-to-back launches hide it
# behind the device's work, all but the first.
LAUNCH_SHARE = 0.6
# The cases time at least this many kernels, so a correct timer measures at most
# 1 + LAUNCH_SHARE / MIN_REPEATS kernels per kernel (the first launch's host cost, spread).
MIN_REPEATS = 8
UPPER = 1.35  # the window's top, in kernels: see timer_compare
ROUNDING = 1e-9  # relative: the float sums of the simulated clock, nothing else


def timer_compare(expected: Any, got: Any) -> Verdict:
    """At least the kernel's duration (on the simulated clock a correct timer reads exactly
    kernel_s (1 + LAUNCH_SHARE / repeats), never less); at most UPPER times it. The top lies
    above what a correct timer reads (1 + LAUNCH_SHARE / MIN_REPEATS = 1.075) and below the
    band of a timer that pays a launch per kernel (1 + LAUNCH_SHARE, its hint's band from 1.4),
    so that mistake always gets its hint; a timer that lets earlier work into its clock is
    failed by the cases built for it (a backlog), with their hint."""
    try:
        value = float(np.asarray(got).item())
    except (TypeError, ValueError) as exc:
        return Verdict(False, f"return one number of seconds, got a {type(got).__name__} ({exc})")
    e = float(expected)
    if e * (1 - ROUNDING) <= value <= UPPER * e:
        return Verdict(True)
    return Verdict(False, f"measured {value:.6g} s for a kernel that takes {e:.6g} s")


class Launcher:
    """launch() for the student's timer: spends LAUNCH_SHARE of a kernel's time on the host's
    simulated clock, then queues one kernel of the case's duration on the simulated device (the
    first one slower) and returns without waiting for it. The durations live here and in the
    device alone: no frame above the student's function holds the case."""

    def __init__(self, device: Any, kernel_s: float, first_extra_s: float) -> None:
        self._device, self._kernel_s, self._first_extra_s = device, kernel_s, first_extra_s
        self.count = 0

    def __call__(self) -> None:
        self.count += 1
        self._device.host_work(LAUNCH_SHARE * self._kernel_s)  # the host's cost of a launch
        self._device.launch(self._kernel_s + (self._first_extra_s if self.count == 1 else 0.0))


def call_timer(fn: Callable[..., Any], args: Case) -> float:
    """The student's timer, ``fn(launch, synchronize, clock, warmup, repeats)``, against a
    simulated device: launch() costs the host LAUNCH_SHARE of kernel_s, queues one kernel of
    kernel_s (the first one slower) and returns; synchronize() waits for the queue; clock() reads
    the device's simulated time. The case is (kernel_s, warmup, repeats, backlog_s,
    first_extra_s): the backlog is work launched before the timer is called and still running."""
    from edu_dl.gpu.timing import SimulatedAsyncDevice

    warmup, repeats = int(args[1]), int(args[2])
    device = SimulatedAsyncDevice("check-gpu")
    launch = Launcher(device, float(args[0]), float(args[4]))
    if args[3]:
        device.launch(float(args[3]))  # launched earlier, still running
    del args  # the case's durations stay in launch and the device
    got = fn(launch, device.synchronize, device.clock, warmup, repeats)
    if launch.count == 0:
        raise CheckFailure("your timer never called launch(): call it once per kernel to time")
    if device.syncs == 0:
        raise CheckFailure("your timer never called synchronize(): launch() returns at once, "
                           "while the device is still working, so the clock stops before the "
                           "kernel has run")
    if device.clock_reads == 0:
        raise CheckFailure("your timer never called clock(): read the time with the clock it is "
                           "handed (here the device's simulated time, which time.perf_counter "
                           "does not see; on a real GPU you pass time.perf_counter)")
    if launch.count != warmup + repeats:
        raise CheckFailure(f"launch() was called {launch.count} times with warmup={warmup}, "
                           f"repeats={repeats}: launch warmup times, then time repeats "
                           "launches")
    try:
        return float(got)
    except (TypeError, ValueError):
        raise CheckFailure(f"return the time per kernel in seconds (a float), got a "
                           f"{type(got).__name__}") from None


# Ways to read the case (or the grader's inputs) instead of timing: frames, closures, objects'
# insides, the environment and files. A timer needs none of them.
PEEKING = {"_getframe", "currentframe", "f_back", "f_locals", "f_globals", "tb_frame",
           "getouterframes", "getframeinfo", "__closure__", "cell_contents", "gc",
           "get_objects", "get_referrers", "__self__", "__dict__", "__globals__", "vars",
           "globals", "locals", "getattr", "eval", "exec", "__import__", "import_module",
           "environ", "getenv", "load", "open"}
TIMER_PARAMS = ("launch", "synchronize", "clock")  # the device's API, called and nothing else


def timer_source(source: str) -> Verdict:
    """The timer calls its ``synchronize`` and ``clock`` arguments (by their names in its own
    signature), looks inside none of the three, and peeks at nothing."""
    node = definition_node(source)
    args = getattr(node, "args", None)
    params = [a.arg for a in args.args] if args is not None else []
    names = dict(zip(TIMER_PARAMS, params + list(TIMER_PARAMS)[len(params):]))
    called = {n.func.id for n in ast.walk(node) if isinstance(n, ast.Call)
              and isinstance(n.func, ast.Name)}
    if names["synchronize"] not in called:
        return Verdict(False, f"the timer never calls {names['synchronize']}(): launch() "
                              "returns at once, so without it the clock stops before the "
                              "kernel has run")
    if names["clock"] not in called:
        return Verdict(False, f"the timer never calls {names['clock']}(): read the time with "
                              "the clock it is handed")
    inside = sorted({f"{n.value.id}.{n.attr}" for n in ast.walk(node)
                     if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)
                     and n.value.id in names.values()})
    if inside:
        return Verdict(False, "the timer must call launch, synchronize and clock, not look "
                              f"inside them: it reads {', '.join(inside)}")
    peeking = code_names(source) & PEEKING
    if peeking:
        return Verdict(False, "the timer must measure the kernel, not look its duration up: it "
                              f"uses {', '.join(sorted(peeking))}")
    return Verdict(True)


@dataclass(frozen=True)
class BelowFraction(Rule):
    """A number below ``fraction`` of the expected one (the time of a launch, not of a kernel)."""

    fraction: float = 0.2

    def test(self, expected: Any, got: Any, args: Case) -> bool:
        return as_float(got) < self.fraction * expected


@dataclass(frozen=True)
class NearMultiple(Rule):
    """A number within ``within`` times the expected one of ``factor`` times it, the factor
    multiplied by argument ``factor_arg`` where one is named (milliseconds, a total of n)."""

    factor: float = 1.0
    factor_arg: int | None = None
    within: float = 0.5

    def test(self, expected: Any, got: Any, args: Case) -> bool:
        factor = self.factor * (1 if self.factor_arg is None else int(args[self.factor_arg]))
        return abs(as_float(got) - factor * expected) < self.within * expected


@dataclass(frozen=True)
class ExceedsByArgument(Rule):
    """A number at least ``fraction`` of argument ``argument`` above the expected one (a delay
    the case adds, counted), divided by argument ``per_arg`` where one is named (a delay spread
    over the repeats)."""

    argument: int = 0
    fraction: float = 0.5
    per_arg: int | None = None

    def test(self, expected: Any, got: Any, args: Case) -> bool:
        spread = 1 if self.per_arg is None else int(args[self.per_arg])
        return as_float(got) >= expected + self.fraction * float(args[self.argument]) / spread
