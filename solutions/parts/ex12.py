"""Exercise 12, GPU practice: a training step's memory budget, the largest batch that fits, and a
timer for asynchronous work.

The oracles: ``edu_dl.memory`` (saved tensors counted by autograd's own hooks during a forward pass
on PyTorch's meta device, parameters and optimizer state from the model) for the budget and the
largest batch, on MLPs built by ``edu_dl.models_zoo.mlp``; the kernel's own duration for the timer.
The timer is run by a call wrapper against ``edu_dl.gpu_timing.FakeAsyncDevice``, a background
thread whose launches return at once, with work still running when the timer is called and a slow
first launch (a warm-up cost).

Judged outside the sandbox: every byte count and batch size exactly; the timer's result against the
kernel's duration (a sleep never ends early, so a correct timer never reports less; the upper bound
leaves room for a loaded machine); from the submitted source, that the timer calls its
``synchronize`` argument and reads a clock. How often it launched and synchronized in the sandbox
is check()'s feedback only.
"""

from __future__ import annotations

import ast
import itertools
from collections.abc import Callable
from typing import Any

import numpy as np

from edu_dl.grading.source import code_names, definition_node, names_check
from edu_dl.grading.spec import CheckFailure, Part, Verdict, tolerance

Case = tuple[Any, ...]
EXACT = tolerance(rtol=0.0, atol=0.0)
OPTIMIZERS = ("sgd", "sgd_momentum", "adam")
BUFFERS = {"sgd": 0, "sgd_momentum": 1, "adam": 2}


def _dtype(itemsize: int) -> Any:
    import torch

    return {2: torch.float16, 4: torch.float32, 8: torch.float64}[int(itemsize)]


def _sizes(value: Any) -> list[int]:
    return [int(v) for v in np.asarray(value).ravel()]


def _budget(sizes: Any, batch_size: int, itemsize: int, optimizer: str) -> Any:
    from edu_dl import memory, models_zoo

    sizes = _sizes(sizes)
    return memory.budget(models_zoo.mlp(sizes), (sizes[0],), int(batch_size), str(optimizer),
                         _dtype(itemsize))


def _params(sizes: list[int]) -> tuple[int, int]:
    """(weights, biases) of the MLP, as numbers of values."""
    pairs = list(itertools.pairwise(sizes))
    return sum(a * b for a, b in pairs), sum(b for _, b in pairs)


# --------------------------------------------------------------------------- 1. the budget


def _random_sizes(rng: np.random.Generator) -> list[int]:
    return [int(d) for d in rng.integers(1, 300, size=int(rng.integers(2, 6)))]


def _budget_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    """(sizes, batch_size, itemsize, optimizer): the lecture's tiny MLP first."""
    if not hidden:
        return [(np.array([4, 5, 3]), 7, 4, "adam"), (np.array([784, 256, 128, 10]), 64, 4,
                                                      "sgd_momentum"),
                (np.array([10, 3]), 5, 8, "sgd"), (np.array([32, 64, 64, 2]), 16, 2, "adam")]
    return [(np.array(_random_sizes(rng)), int(rng.integers(1, 257)),
             int(rng.choice([2, 4, 8])), str(rng.choice(OPTIMIZERS))) for _ in range(5)]


def _budget_expected(sizes: Any, batch_size: int, itemsize: int, optimizer: str
                     ) -> tuple[int, int, int, int]:
    b = _budget(sizes, batch_size, itemsize, optimizer)
    return b.params, b.grads, b.optimizer_state, b.activations


def _call_budget(fn: Callable[..., Any], args: Case) -> Any:
    sizes, batch_size, itemsize, optimizer = args
    return fn(_sizes(sizes), int(batch_size), int(itemsize), str(optimizer))


def _got(g: Any, j: int) -> int:
    return int(np.asarray(g[j]).item())


def _hidden_units(a: Case) -> int:
    return sum(_sizes(a[0])[1:-1])


BUDGET_HINTS = (
    (lambda e, g, a: _got(g, 0) * int(a[2]) == e[0],
     "count bytes, not values: multiply by itemsize"),
    (lambda e, g, a: _got(g, 0) == _params(_sizes(a[0]))[0] * int(a[2]),
     "the biases are parameters too: Linear(a, b) holds a * b weights and b biases"),
    (lambda e, g, a: str(a[3]) == "adam" and _got(g, 2) == e[0],
     "Adam keeps two buffers per parameter (the first and second moments, exp_avg and "
     "exp_avg_sq): 2 x the parameter bytes"),
    (lambda e, g, a: str(a[3]) == "sgd_momentum" and _got(g, 2) == 0,
     "SGD with momentum keeps one velocity buffer per parameter: 1 x the parameter bytes"),
    (lambda e, g, a: str(a[3]) == "sgd" and _got(g, 2) > 0,
     "plain SGD keeps no state between steps: 0 bytes"),
    (lambda e, g, a: _got(g, 3) == e[3] + int(a[1]) * _hidden_units(a) * int(a[2]),
     "the Linear outputs before each ReLU are not saved: ReLU's backward needs only its output, "
     "and the next Linear saves that same tensor as its input (count it once)"),
    (lambda e, g, a: _got(g, 3) == e[3] + int(a[1]) * _sizes(a[0])[-1] * int(a[2]),
     "the network's output is not saved by the network (no layer after it needs it for "
     "backward; a loss would save what it needs itself)"),
    (lambda e, g, a: _got(g, 3) == e[3] - int(a[1]) * _sizes(a[0])[0] * int(a[2]),
     "the input batch is saved too: the first weight's gradient is X^T @ delta, so backward "
     "needs X"),
    (lambda e, g, a: _got(g, 3) * int(a[1]) == e[3],
     "activations grow with the batch: every saved tensor has batch_size rows"),
)


# --------------------------------------------------------------------------- 2. the largest batch


def _per_example_and_fixed(sizes: list[int], itemsize: int, optimizer: str) -> tuple[int, int]:
    one = _budget(sizes, 1, itemsize, optimizer)
    return one.activations, one.total - one.activations


def _max_batch_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    """(sizes, itemsize, optimizer, budget_bytes): room for k examples plus a remainder r (k = -1:
    one byte short of one example; k = -2: half the fixed part)."""
    if not hidden:
        specs = [([784, 256, 128, 10], 4, "adam", 1000, 100), ([4, 5, 3], 4, "sgd", 37, 0),
                 ([32, 64, 64, 2], 2, "sgd_momentum", 3, 5), ([100, 10], 8, "adam", -2, 0)]
    else:
        specs = [(_random_sizes(rng), int(rng.choice([2, 4, 8])), str(rng.choice(OPTIMIZERS)),
                  int(rng.integers(0, 5000)), -2) for _ in range(4)]
        specs += [(_random_sizes(rng), 4, "adam", -1, 0), (_random_sizes(rng), 2, "sgd", -2, 0)]
    cases: list[Case] = []
    for sizes, itemsize, optimizer, k, remainder in specs:
        per, fixed = _per_example_and_fixed(sizes, itemsize, optimizer)
        if k == -1:  # one byte short of one example
            budget = fixed + per - 1
        elif k == -2:  # not even the parameters fit
            budget = fixed // 2
        else:
            r = int(rng.integers(0, per)) if remainder == -2 else min(remainder, per - 1)
            budget = fixed + k * per + r
        cases.append((np.array(sizes), itemsize, optimizer, budget))
    return cases


def _max_batch_expected(sizes: Any, itemsize: int, optimizer: str, budget_bytes: int) -> int:
    from edu_dl import memory, models_zoo

    sizes = _sizes(sizes)
    return memory.max_batch(models_zoo.mlp(sizes), (sizes[0],), int(budget_bytes),
                            str(optimizer), _dtype(itemsize))


def _call_max_batch(fn: Callable[..., Any], args: Case) -> Any:
    sizes, itemsize, optimizer, budget_bytes = args
    return fn(_sizes(sizes), int(itemsize), str(optimizer), int(budget_bytes))


def _fixed_left_out(g: Any, a: Case) -> bool:
    per, _ = _per_example_and_fixed(_sizes(a[0]), int(a[1]), str(a[2]))
    return int(np.asarray(g).item()) == int(a[3]) // per


MAX_BATCH_HINTS = (
    (lambda e, g, a: int(np.asarray(g).item()) == e + 1,
     "one too many: the whole step must fit, budget(batch).total <= budget_bytes"),
    (lambda e, g, a: int(np.asarray(g).item()) == e - 1,
     "one too few: a batch whose total equals the budget exactly still fits (<=)"),
    (lambda e, g, a: e == 0 and int(np.asarray(g).item()) < 0,
     "when not even one example fits, return 0, not a negative number"),
    (lambda e, g, a: _fixed_left_out(g, a),
     "parameters, gradients and optimizer state take their share before any activation: "
     "(budget - fixed) // bytes_per_example"),
)


# --------------------------------------------------------------------------- 3. the timer


def _timer_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    """(kernel_s, warmup, repeats, backlog_s, first_extra_s): the backlog is work launched before
    the timer is called and still running; the first launch costs first_extra_s more."""
    if not hidden:
        return [(0.04, 1, 5, 0.0, 0.0), (0.03, 1, 1, 0.25, 0.0), (0.05, 2, 1, 0.0, 0.25),
                (0.02, 1, 5, 0.1, 0.1)]
    cases: list[Case] = []
    for backlog, first, repeats in ((0.3, 0.0, 1), (0.0, 0.3, 1), (0.15, 0.15, 5)):
        cases.append((round(float(rng.uniform(0.03, 0.06)), 3), int(rng.integers(1, 3)),
                      repeats, backlog, first))
    return cases


def _timer_expected(kernel_s: float, warmup: int, repeats: int, backlog_s: float,
                    first_extra_s: float) -> float:
    return float(kernel_s)


def timer_compare(expected: Any, got: Any) -> Verdict:
    """At least the kernel's duration (a sleep never ends early, minus 5% for clock
    granularity); at most twice it plus 80 ms (a loaded machine wakes threads late). The cases
    make every typical mistake cost more than that: 5 repeats, backlogs of 0.1 to 0.3 s."""
    try:
        value = float(np.asarray(got).item())
    except (TypeError, ValueError) as exc:
        return Verdict(False, f"return one number of seconds, got a {type(got).__name__} ({exc})")
    e = float(expected)
    if 0.95 * e <= value <= 2 * e + 0.08:
        return Verdict(True)
    return Verdict(False, f"measured {value:.6g} s for a kernel that takes {e:.6g} s")


class _Launcher:
    """launch() for the student's timer: queues one kernel of the case's duration on the fake
    device (the first one slower) and returns at once. The durations live here and in the
    device alone: no frame above the student's function holds the case."""

    def __init__(self, device: Any, kernel_s: float, first_extra_s: float) -> None:
        self._device, self._kernel_s, self._first_extra_s = device, kernel_s, first_extra_s
        self.count = 0

    def __call__(self) -> None:
        self.count += 1
        self._device.launch(self._kernel_s + (self._first_extra_s if self.count == 1 else 0.0))


def _call_timer(fn: Callable[..., Any], args: Case) -> float:
    """The student's timer against a fake device: launch() queues one kernel of kernel_s
    (the first one slower) and returns at once; synchronize() waits for the queue."""
    from edu_dl.gpu_timing import FakeAsyncDevice

    warmup, repeats = int(args[1]), int(args[2])
    with FakeAsyncDevice("check-gpu") as device:
        launch = _Launcher(device, float(args[0]), float(args[4]))
        if args[3]:
            device.launch(float(args[3]))  # launched earlier, still running
        del args  # the case's durations stay in launch and the device
        before = device.syncs
        got = fn(launch, device.synchronize, warmup, repeats)
        syncs = device.syncs - before
    if launch.count == 0:
        raise CheckFailure("your timer never called launch(): call it once per kernel to time")
    if syncs == 0:
        raise CheckFailure("your timer never called synchronize(): launch() returns at once, "
                           "while the device is still working, so the clock stops before the "
                           "kernel has run")
    if launch.count != warmup + repeats:
        raise CheckFailure(f"launch() was called {launch.count} times with warmup={warmup}, "
                           f"repeats={repeats}: launch warmup times, then time repeats launches, "
                           "one at a time")
    try:
        return float(got)
    except (TypeError, ValueError):
        raise CheckFailure(f"return the median time of one kernel in seconds (a float), got a "
                           f"{type(got).__name__}") from None


CLOCKS = {"perf_counter", "perf_counter_ns", "monotonic", "monotonic_ns", "time", "time_ns"}
# Ways to read the case (or the grader's inputs) instead of timing: frames, closures, objects'
# insides, the environment and files. A timer needs none of them.
PEEKING = {"_getframe", "currentframe", "f_back", "f_locals", "f_globals", "tb_frame",
           "getouterframes", "getframeinfo", "__closure__", "cell_contents", "gc",
           "get_objects", "get_referrers", "__self__", "__dict__", "__globals__", "vars",
           "globals", "locals", "getattr", "eval", "exec", "__import__", "import_module",
           "environ", "getenv", "load", "open"}


def timer_source(source: str) -> Verdict:
    """The timer calls its ``synchronize`` argument and reads a clock (time.perf_counter, ...)."""
    node = definition_node(source)
    args = getattr(node, "args", None)
    params = [a.arg for a in args.args] if args is not None else []
    sync = params[1] if len(params) > 1 else "synchronize"
    calls = [n for n in ast.walk(node) if isinstance(n, ast.Call)
             and isinstance(n.func, ast.Name) and n.func.id == sync]
    if not calls:
        return Verdict(False, f"the timer never calls {sync}(): launch() returns at once, so "
                              "without it the clock stops before the kernel has run")
    names = code_names(source)
    if not names & CLOCKS:
        return Verdict(False, "the timer reads no clock: use time.perf_counter()")
    if names & PEEKING:
        return Verdict(False, "the timer must measure the kernel, not look its duration up: it "
                              f"uses {', '.join(sorted(names & PEEKING))}")
    return Verdict(True)


def _value(g: Any) -> float:
    return float(np.asarray(g).item())


TIMER_HINTS = (
    (lambda e, g, a: _value(g) < 0.2 * e,
     "that is the time of the launch: launch() returns at once while the device works; call "
     "synchronize() after launch() and before you read the clock"),
    (lambda e, g, a: abs(_value(g) - 1e3 * e) < 0.5e3 * e,
     "return seconds (time.perf_counter() differences), not milliseconds"),
    (lambda e, g, a: int(a[2]) > 1 and abs(_value(g) - int(a[2]) * e) < 0.5 * e,
     "return the time of ONE kernel (the median over the repeats), not their total"),
    (lambda e, g, a: int(a[2]) == 1 and float(a[3]) > 0 and _value(g) >= e + 0.5 * float(a[3]),
     "work launched before your timer started was still running, and you counted it: "
     "call synchronize() before starting the clock"),
    (lambda e, g, a: int(a[2]) == 1 and float(a[4]) > 0 and _value(g) >= e + 0.5 * float(a[4]),
     "the first launch pays a one-off cost (a GPU's context, autotuning): run the warm-up "
     "launches, synchronize, and only then time"),
)


# The course's own budget is the oracle: the student's answer must not ask it.
NO_ORACLE = names_check(forbidden=[(
    ("memory", "budget", "saved_activations", "activation_bytes", "parameter_bytes",
     "optimizer_state_bytes", "saved_tensors_hooks", "models_zoo"),
    "the function asks edu_dl.memory (or autograd's hooks) for the answer: count the bytes "
    "yourself from the layer sizes")])

PARTS = [
    Part(
        id="ex12.memory_budget", points=3, cases=_budget_cases, expected=_budget_expected,
        compare=EXACT, call=_call_budget, hints=BUDGET_HINTS, timeout_s=30.0,
        source_check=NO_ORACLE,
        arg_names=("sizes", "batch_size", "itemsize", "optimizer"),
        output_names=("parameters", "gradients", "optimizer_state", "activations"),
    ),
    Part(
        id="ex12.max_batch", points=2, cases=_max_batch_cases, expected=_max_batch_expected,
        compare=EXACT, call=_call_max_batch, hints=MAX_BATCH_HINTS, timeout_s=30.0,
        source_check=NO_ORACLE,
        arg_names=("sizes", "itemsize", "optimizer", "budget_bytes"),
    ),
    Part(
        id="ex12.gpu_timer", points=3, cases=_timer_cases, expected=_timer_expected,
        compare=timer_compare, call=_call_timer, hints=TIMER_HINTS, timeout_s=30.0,
        source_check=timer_source,
        arg_names=("kernel_s", "warmup", "repeats", "backlog_s", "first_extra_s"),
    ),
]
