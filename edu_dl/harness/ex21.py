"""Exercise 21 (pipeline parallelism and fully sharded training), public half: how its parts call
a student's function. Nothing here computes an answer: the oracles, the hidden cases and the
mistake replays stay in the course's private part file.

Each function gets copies of the case (schedules as int64, parameters as float64, the sizes and
times as Python numbers); the guard watches the copies (``edu_dl.grading.authoring.guard.watch``),
so a function that writes into one fails as one that writes into the case does.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from edu_dl.grading.authoring import guard

Case = tuple[Any, ...]


def _copy(j: int, a: Any, dtype: Any) -> np.ndarray:
    """A copy of argument ``j`` in ``dtype``, watched as the argument it stands for."""
    return guard.watch(j, np.array(a, dtype=dtype))


def call_schedule(fn: Callable[..., Any], args: Case) -> Any:
    """gpipe_schedule / one_f_one_b_schedule(stages, microbatches): the sizes as Python ints."""
    stages, microbatches = args
    return fn(int(stages), int(microbatches))


def call_timeline(fn: Callable[..., Any], args: Case) -> Any:
    """pipeline_timeline(order, t_forward, t_backward): an int64 copy of the order, the times as
    Python floats."""
    order, t_forward, t_backward = args
    return fn(_copy(0, order, np.int64), float(t_forward), float(t_backward))


def call_in_flight(fn: Callable[..., Any], args: Case) -> Any:
    """peak_in_flight(order): an int64 copy of the order."""
    return fn(_copy(0, args[0], np.int64))


def call_shard(fn: Callable[..., Any], args: Case) -> Any:
    """fsdp_shard(param, world_size): a float64 copy of the parameter, the size as an int."""
    param, world_size = args
    return fn(_copy(0, param, np.float64), int(world_size))
