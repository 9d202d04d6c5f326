"""Exercise 20 (serving a model), public half: how its parts call a student's function. Nothing
here computes an answer: the oracles, the hidden cases and the mistake replays stay in the
course's private part file.

Each function gets copies of the case (the keys and values as float64, the events and prompt
lengths as int64, the sizes as Python ints); the guard watches the copies
(``edu_dl.grading.authoring.guard.watch``), so a function that writes into one fails as one that
writes into the case does.
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


def call_append(fn: Callable[..., Any], args: Case) -> Any:
    """kv_cache_append(k_cache, v_cache, k_new, v_new) on float64 copies."""
    return fn(*(_copy(j, a, np.float64) for j, a in enumerate(args)))


def call_allocate(fn: Callable[..., Any], args: Case) -> Any:
    """allocate_blocks(events, num_blocks, block_size, max_blocks): an int64 copy of the
    events, the sizes as Python ints."""
    events, num_blocks, block_size, max_blocks = args
    return fn(_copy(0, events, np.int64), int(num_blocks), int(block_size), int(max_blocks))


def call_next_batch(fn: Callable[..., Any], args: Case) -> Any:
    """next_batch(running, waiting, token_budget, max_seqs): an int64 copy of the prompt
    lengths, the counts as Python ints."""
    running, waiting, token_budget, max_seqs = args
    return fn(int(running), _copy(1, waiting, np.int64), int(token_budget), int(max_seqs))
