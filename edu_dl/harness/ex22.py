"""Exercise 22 (JAX sharding), public half: how its parts call a student's function. Nothing here
computes an answer: the oracles, the hidden cases and the mistake replays stay in the course's
private part file.

``call_specs`` turns the returned PartitionSpecs into a table of strings (data the grader compares
outside the sandbox). ``call_tp_forward`` and ``call_dp_grads`` run a per-device body, written as
for ``jax.shard_map``, on ONE device: ``jax.vmap`` with an ``axis_name`` maps the body over the
shards stacked on a leading axis, and a collective inside it (``jax.lax.psum``, ``pmean``) then
reduces over that axis as it would over the devices of a mesh axis (the JAX documentation's
"named axes" that ``vmap``, ``pmap`` and ``shard_map`` share). So the parts need no particular
number of devices: a body that forgets its collective returns each shard's own partial result,
which differs from one device's answer. The body's result comes back stacked, one row per shard.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from edu_dl.grading.authoring.spec import CheckFailure

Case = tuple[Any, ...]
ARRAYS = ("x", "w1", "w2", "y")  # the two-layer net's arrays, in the order of the table's rows
NOT_SPLIT = "-"  # a dimension not split over any mesh axis (None in a PartitionSpec)


def spec_row(spec: Any, name: str) -> list[str]:
    """One array's PartitionSpec (or a tuple like one) as two strings: the mesh axis each of
    the array's two dimensions is split over, ``NOT_SPLIT`` where none; a dimension split over
    several axes as their names joined by '+'."""
    if spec is None:
        entries: list[Any] = []
    elif isinstance(spec, tuple | list) or type(spec).__name__ in ("PartitionSpec", "P"):
        entries = list(spec)  # a PartitionSpec iterates over its entries
    else:
        raise CheckFailure(f"the spec of {name} is a {type(spec).__name__}: return a "
                           "jax.sharding.PartitionSpec (P(...)) for each array")
    if len(entries) > 2:
        raise CheckFailure(f"the spec of {name} names {len(entries)} dimensions; {name} has 2")
    row = []
    for entry in entries + [None] * (2 - len(entries)):
        if entry is None:
            row.append(NOT_SPLIT)
        elif isinstance(entry, str):
            row.append(entry)
        elif isinstance(entry, tuple | list) and all(isinstance(e, str) for e in entry):
            row.append("+".join(entry) if entry else NOT_SPLIT)
        else:
            raise CheckFailure(f"the spec of {name} has {entry!r}: each entry is a mesh axis "
                               "name (a string), a tuple of names, or None")
    return row


def call_specs(fn: Callable[..., Any], args: Case) -> np.ndarray:
    """partition_specs(strategy, batch_axis, model_axis): its dict of four PartitionSpecs as a
    (4, 2) array of strings, rows x, w1, w2, y."""
    strategy, batch_axis, model_axis = args
    result = fn(str(strategy), str(batch_axis), str(model_axis))
    if not isinstance(result, Mapping):
        raise CheckFailure(f"return a dict with the keys {list(ARRAYS)}; got "
                           f"{type(result).__name__}")
    missing = [name for name in ARRAYS if name not in result]
    if missing:
        raise CheckFailure(f"the dict has no {missing}: give a PartitionSpec for each of "
                           f"{list(ARRAYS)}")
    return np.array([spec_row(result[name], name) for name in ARRAYS], dtype=str)


def _numpy(value: Any, what: str) -> np.ndarray:
    try:
        return np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise CheckFailure(f"{what} is not an array of numbers ({type(value).__name__}): "
                           f"{exc}") from None


def _per_shard(fn: Callable[..., Any], axis_name: str, in_axes: tuple[Any, ...],
               args: tuple[np.ndarray, ...]) -> Any:
    """fn mapped over the shards (vmap with a named axis, compiled once with jit)."""
    import jax

    mapped = jax.vmap(fn, in_axes=in_axes, axis_name=axis_name)
    try:
        return jax.jit(mapped)(*args)
    except NameError as exc:  # an axis name that is not the one bound
        raise CheckFailure(f"{exc}: the shards run over the mesh axis named "
                           f"'{axis_name}'") from None


def call_tp_forward(fn: Callable[..., Any], args: Case) -> np.ndarray:
    """tp_forward(x, w1_block, w2_block) on each of k shards (w1 split by columns, w2 by rows,
    x whole), over the axis 'model'; the outputs stacked, (k, N, D_out)."""
    x, w1, w2, k = args
    w1_blocks = np.stack(np.split(np.asarray(w1, dtype=np.float64), int(k), axis=1))
    w2_blocks = np.stack(np.split(np.asarray(w2, dtype=np.float64), int(k), axis=0))
    out = _per_shard(fn, "model", (None, 0, 0),
                     (np.asarray(x, dtype=np.float64), w1_blocks, w2_blocks))
    got = _numpy(out, "the output")
    shape = (int(k), np.shape(x)[0], np.shape(w2)[1])
    if got.shape != shape:
        raise CheckFailure(f"each device's output has shape {got.shape[1:]}; it must be "
                           f"(N, D_out) = {shape[1:]}")
    return got


def call_dp_grads(fn: Callable[..., Any], args: Case) -> tuple[np.ndarray, np.ndarray]:
    """dp_grads(w1, w2, x_shard, y_shard) on each of k shards of the batch (x and y split by
    rows, the weights whole), over the axis 'data'; its (g1, g2) stacked, (k, *w1.shape) and
    (k, *w2.shape)."""
    w1, w2, x, y, k = args
    x_shards = np.stack(np.split(np.asarray(x, dtype=np.float64), int(k), axis=0))
    y_shards = np.stack(np.split(np.asarray(y, dtype=np.float64), int(k), axis=0))
    out = _per_shard(fn, "data", (None, None, 0, 0),
                     (np.asarray(w1, dtype=np.float64), np.asarray(w2, dtype=np.float64),
                      x_shards, y_shards))
    if not isinstance(out, tuple | list) or len(out) != 2:
        raise CheckFailure(f"return a pair (g1, g2), one gradient per weight; got "
                           f"{type(out).__name__}")
    g1, g2 = _numpy(out[0], "g1"), _numpy(out[1], "g2")
    for got, w, name in ((g1, w1, "g1"), (g2, w2, "g2")):
        if got.shape[1:] != np.shape(w):
            raise CheckFailure(f"{name} has shape {got.shape[1:]} on each device; it must have "
                               f"its weight's shape {np.shape(w)}")
    return g1, g2
