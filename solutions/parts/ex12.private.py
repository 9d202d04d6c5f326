"""Exercise 12, GPU practice: a training step's memory budget, the largest batch that fits, and a
timer for asynchronous work (``ex12.stream_timer``, which exercise 02c checks: it moved there with
the lesson on asynchronous execution and kept its id).

The oracles: ``edu_dl.gpu.memory`` (saved tensors counted by autograd's own hooks during a forward
pass on PyTorch's meta device, parameters and optimizer state from the model) for the budget and the
largest batch, on MLPs built by ``edu_dl.gpu.zoo.mlp``; the kernel's own duration for the timer.
The timer is run by a call wrapper (``edu_dl.harness.ex12.call_timer``, public like the other
call adapters, the timer's comparison and source check, and the generic hint rules) against
``edu_dl.gpu.timing.SimulatedAsyncDevice``, a device queue on a simulated clock that the timer is
handed as ``clock``, with launches that cost the host a share of a kernel's time and return
without waiting for the kernel, work still running when the timer is called and a slow first
launch (a warm-up cost). Nothing sleeps: every timer reads exactly what the simulation says, so
its verdict and hint do not depend on how busy the machine is. The timer asked for is the
device's time per kernel in a stream of back-to-back launches, where the lecture's timer
synchronizes after every launch and so counts each launch's host cost.

Judged outside the sandbox: every byte count and batch size exactly; the timer's result against the
kernel's duration (a correct timer reads kernel_s (1 + LAUNCH_SHARE / repeats) on the simulated
clock, never less); from the submitted source, that the timer calls its ``synchronize`` and
``clock`` arguments and looks inside neither. How often it launched, synchronized and read the
clock in the sandbox is check()'s feedback only.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from edu_dl.grading.authoring.hints import Equals, Greater, Less, Mistake
from edu_dl.grading.authoring.source import names_check
from edu_dl.grading.authoring.spec import Part, tolerance
from edu_dl.harness.ex12 import (
    LAUNCH_SHARE,
    MIN_REPEATS,
    BelowFraction,
    ExceedsByArgument,
    IntegerOffBy,
    NearMultiple,
    as_int,
    call_budget,
    call_max_batch,
    call_timer,
    sizes_list,
    timer_compare,
    timer_source,
)

Case = tuple[Any, ...]
EXACT = tolerance(rtol=0.0, atol=0.0)
OPTIMIZERS = ("sgd", "sgd_momentum", "adam")
BUFFERS = {"sgd": 0, "sgd_momentum": 1, "adam": 2}


def _dtype(itemsize: int) -> Any:
    import torch

    return {2: torch.float16, 4: torch.float32, 8: torch.float64}[int(itemsize)]


_sizes = sizes_list
EXACT_INT: dict[str, Any] = {"rtol": 0.0, "atol": 0.0, "view": as_int}  # a Mistake on int(result)


def _budget(sizes: Any, batch_size: int, itemsize: int, optimizer: str) -> Any:
    from edu_dl.gpu import memory
    from edu_dl.gpu import zoo as models_zoo

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


def _hidden_units(a: Case) -> int:
    return sum(_sizes(a[0])[1:-1])


BUDGET_HINTS = (
    Mistake(lambda e, a: e[0] // int(a[2]), "count bytes, not values: multiply by itemsize",
            output=0, **EXACT_INT),
    Mistake(lambda e, a: _params(_sizes(a[0]))[0] * int(a[2]),
            "the biases are parameters too: Linear(a, b) holds a * b weights and b biases",
            output=0, **EXACT_INT),
    Mistake(lambda e, a: e[0] if str(a[3]) == "adam" else None,
            "Adam keeps two buffers per parameter (the first and second moments, exp_avg and "
            "exp_avg_sq): 2 x the parameter bytes", output=2, **EXACT_INT),
    Equals("SGD with momentum keeps one velocity buffer per parameter: 1 x the parameter bytes",
           output=2, value=0, when=lambda e, a: str(a[3]) == "sgd_momentum"),
    Greater("plain SGD keeps no state between steps: 0 bytes", output=2,
            when=lambda e, a: str(a[3]) == "sgd"),
    Mistake(lambda e, a: e[3] + int(a[1]) * _hidden_units(a) * int(a[2]),
            "the Linear outputs before each ReLU are not saved: ReLU's backward needs only its "
            "output, and the next Linear saves that same tensor as its input (count it once)",
            output=3, **EXACT_INT),
    Mistake(lambda e, a: e[3] + int(a[1]) * _sizes(a[0])[-1] * int(a[2]),
            "the network's output is not saved by the network (no layer after it needs it for "
            "backward; a loss would save what it needs itself)", output=3, **EXACT_INT),
    Mistake(lambda e, a: e[3] - int(a[1]) * _sizes(a[0])[0] * int(a[2]),
            "the input batch is saved too: the first weight's gradient is X^T @ delta, so "
            "backward needs X", output=3, **EXACT_INT),
    # activations = batch_size * (bytes of one example's saved tensors): a multiple of the batch
    Mistake(lambda e, a: e[3] // int(a[1]) if e[3] % int(a[1]) == 0 else None,
            "activations grow with the batch: every saved tensor has batch_size rows",
            output=3, **EXACT_INT),
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
    from edu_dl.gpu import memory
    from edu_dl.gpu import zoo as models_zoo

    sizes = _sizes(sizes)
    return memory.max_batch(models_zoo.mlp(sizes), (sizes[0],), int(budget_bytes),
                            str(optimizer), _dtype(itemsize))


def _fixed_left_out(a: Case) -> int:
    """The budget divided by the bytes per example, the fixed part forgotten."""
    per, _ = _per_example_and_fixed(_sizes(a[0]), int(a[1]), str(a[2]))
    return int(a[3]) // per


MAX_BATCH_HINTS = (
    IntegerOffBy("one too many: the whole step must fit, budget(batch).total <= budget_bytes",
                 delta=1),
    IntegerOffBy("one too few: a batch whose total equals the budget exactly still fits (<=)",
                 delta=-1),
    Less("when not even one example fits, return 0, not a negative number",
         when=lambda e, a: e == 0),
    Mistake(lambda e, a: _fixed_left_out(a),
            "parameters, gradients and optimizer state take their share before any activation: "
            "(budget - fixed) // bytes_per_example", **EXACT_INT),
)


# --------------------------------------------------------------------------- 3. the timer


def _timer_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    """(kernel_s, warmup, repeats, backlog_s, first_extra_s): the backlog is work launched before
    the timer is called and still running; the first launch costs first_extra_s more. At least
    MIN_REPEATS repeats, so one launch's host cost, spread over them, stays inside the window; a
    backlog large enough that counting it, spread over 12 repeats, leaves the window of a 60 ms
    kernel."""
    if not hidden:
        return [(0.04, 1, 10, 0.0, 0.0), (0.03, 1, 8, 0.4, 0.0), (0.05, 2, 8, 0.0, 0.3),
                (0.03, 1, 10, 0.4, 0.2)]
    cases: list[Case] = []
    for backlog, first in ((0.4, 0.0), (0.0, 0.3), (0.4, 0.2)):
        cases.append((round(float(rng.uniform(0.03, 0.06)), 3), int(rng.integers(1, 3)),
                      int(rng.integers(MIN_REPEATS, 13)), backlog, first))
    return cases


def _timer_expected(kernel_s: float, warmup: int, repeats: int, backlog_s: float,
                    first_extra_s: float) -> float:
    return float(kernel_s)


TIMER_HINTS = (
    BelowFraction(
        "the clock stopped while the device was still working: launch() returns once the kernel "
        "is queued, not done; call synchronize() before you read the clock", fraction=0.9),
    NearMultiple(
        "that is a launch plus its kernel: synchronizing after every launch leaves the device "
        "idle while the host launches the next one; launch the repeats back to back and "
        "synchronize once at the end", factor=1 + LAUNCH_SHARE, within=0.2),
    # the total holds one launch's host cost too (LAUNCH_SHARE of a kernel)
    NearMultiple("return the time of ONE kernel (the total divided by repeats), not their total",
                 factor_arg=2, within=1.0),
    ExceedsByArgument(
        "work queued before your clock started was still running, and you counted it (work "
        "launched before the call, or your own warm-up launches): synchronize() before starting "
        "the clock", argument=3, per_arg=2, fraction=0.8, when=lambda e, a: float(a[3]) > 0),
)


# The course's own budget is the oracle: the student's answer must not ask it.
NO_ORACLE = names_check(forbidden=[(
    ("memory", "budget", "saved_activations", "activation_bytes", "parameter_bytes",
     "optimizer_state_bytes", "saved_tensors_hooks", "models_zoo"),
    "the function asks edu_dl.gpu.memory (or autograd's hooks) for the answer: count the bytes "
    "yourself from the layer sizes")])

PARTS = [
    Part(
        id="ex12.memory_budget", points=3, cases=_budget_cases, expected=_budget_expected,
        compare=EXACT, call=call_budget, hints=BUDGET_HINTS, timeout_s=30.0,
        source_check=NO_ORACLE,
        arg_names=("sizes", "batch_size", "itemsize", "optimizer"),
        output_names=("parameters", "gradients", "optimizer_state", "activations"),
    ),
    Part(
        id="ex12.max_batch", points=2, cases=_max_batch_cases, expected=_max_batch_expected,
        compare=EXACT, call=call_max_batch, hints=MAX_BATCH_HINTS, timeout_s=30.0,
        source_check=NO_ORACLE,
        arg_names=("sizes", "itemsize", "optimizer", "budget_bytes"),
        uses=("ex12.memory_budget",),
    ),
    Part(
        id="ex12.stream_timer", points=3, cases=_timer_cases, expected=_timer_expected,
        compare=timer_compare, call=call_timer, hints=TIMER_HINTS, timeout_s=30.0,
        source_check=timer_source,
        arg_names=("kernel_s", "warmup", "repeats", "backlog_s", "first_extra_s"),
    ),
]
