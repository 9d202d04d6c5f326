"""Exercise 17, GPU practice: a training step's memory budget and the largest batch that fits.

The oracles: ``edu_dl.gpu.memory`` (saved tensors counted by autograd's own hooks during a forward
pass on PyTorch's meta device, parameters and optimizer state from the model), on MLPs built by
``edu_dl.gpu.zoo.mlp``.

Judged outside the sandbox: every byte count and batch size exactly.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from edu_dl.grading.authoring.hints import Equals, Greater, Less, Mistake
from edu_dl.grading.authoring.source import names_check
from edu_dl.grading.authoring.spec import Part, tolerance
from edu_dl.harness.ex17 import (
    IntegerOffBy,
    as_int,
    call_budget,
    call_max_batch,
    sizes_list,
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


# The course's own budget is the oracle: the student's answer must not ask it.
NO_ORACLE = names_check(forbidden=[(
    ("memory", "budget", "saved_activations", "activation_bytes", "parameter_bytes",
     "optimizer_state_bytes", "saved_tensors_hooks", "models_zoo"),
    "the function asks edu_dl.gpu.memory (or autograd's hooks) for the answer: count the bytes "
    "yourself from the layer sizes")])

PARTS = [
    Part(
        id="ex17.memory_budget", points=3, cases=_budget_cases, expected=_budget_expected,
        compare=EXACT, call=call_budget, hints=BUDGET_HINTS, timeout_s=30.0,
        source_check=NO_ORACLE,
        arg_names=("sizes", "batch_size", "itemsize", "optimizer"),
        output_names=("parameters", "gradients", "optimizer_state", "activations"),
    ),
    Part(
        id="ex17.max_batch", points=2, cases=_max_batch_cases, expected=_max_batch_expected,
        compare=EXACT, call=call_max_batch, hints=MAX_BATCH_HINTS, timeout_s=30.0,
        source_check=NO_ORACLE,
        arg_names=("sizes", "itemsize", "optimizer", "budget_bytes"),
        uses=("ex17.memory_budget",),
    ),
]
