"""Exercise 19 (quantization), public half: how its parts call a student's function, and the
dtype checks of their integer outputs. Nothing here computes an answer: the oracles, the hidden
cases and the mistake replays stay in the course's private part file.

Each function gets copies of the case (floats as float64, the quantized values as int8, the zero
points and scalars as Python numbers); the guard watches the copies
(``edu_dl.grading.authoring.guard.watch``), so a function that writes into one fails as one that
writes into the case does. The values are compared with the part's tolerance, which treats an
integer and a float of the same value alike; the result checks below then ask for the dtype the
contract names, since an int8 tensor held as float64 is eight times the memory quantization was
meant to save.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from edu_dl.grading.authoring import guard
from edu_dl.grading.authoring.spec import Verdict

Case = tuple[Any, ...]


def _copy(j: int, a: Any, dtype: Any) -> np.ndarray:
    """A copy of argument ``j`` in ``dtype``, watched as the argument it stands for."""
    return guard.watch(j, np.array(a, dtype=dtype))


def call_params(fn: Callable[..., Any], args: Case) -> Any:
    """per_channel_params(w) on a float64 copy."""
    return fn(_copy(0, args[0], np.float64))


def call_quantize(fn: Callable[..., Any], args: Case) -> Any:
    """quantize_per_channel(w, scale, zero_point): float64 copies of w and scale, the zero points
    as int32 (what per_channel_params may return)."""
    w, scale, zero_point = args
    return fn(_copy(0, w, np.float64), _copy(1, scale, np.float64),
              _copy(2, zero_point, np.int32))


def call_matmul(fn: Callable[..., Any], args: Case) -> Any:
    """int8_matmul(qx, scale_x, zero_x, qw, scale_w): int8 copies of qx and qw, scale_x a Python
    float, zero_x a Python int, a float64 copy of scale_w."""
    qx, scale_x, zero_x, qw, scale_w = args
    return fn(_copy(0, qx, np.int8), float(scale_x), int(zero_x), _copy(3, qw, np.int8),
              _copy(4, scale_w, np.float64))


def _dtype_verdict(got: Any, output: int, name: str, wanted: tuple[Any, ...],
                   what: str) -> Verdict:
    try:
        dtype = np.asarray(got[output]).dtype
    except Exception as exc:  # compare has already passed; this is only defensive
        return Verdict(False, f"output {output} ({name}): not an array ({exc})", output=output)
    if any(dtype == np.dtype(w) for w in wanted):
        return Verdict(True)
    return Verdict(False, f"output {output} ({name}): the values are right, but its dtype is "
                          f"{dtype}: {what}", output=output)


def params_result_check(got: Any, args: Case) -> Verdict:
    """The zero points are integers (any integer dtype): a zero point is a quantized value."""
    try:
        kind = np.asarray(got[1]).dtype.kind
    except Exception as exc:
        return Verdict(False, f"output 1 (zero_point): not an array ({exc})", output=1)
    if kind in "iu":
        return Verdict(True)
    return Verdict(False, "output 1 (zero_point): the values are right, but they are stored as "
                          f"{np.asarray(got[1]).dtype}: a zero point is an integer, the code "
                          "that real 0.0 maps to (return e.g. .astype(np.int32))", output=1)


def quantize_result_check(got: Any, args: Case) -> Verdict:
    """The quantized weights are int8."""
    return _dtype_verdict(got, 0, "q", (np.int8,),
                          "quantized weights are stored as np.int8, one byte each")


def matmul_result_check(got: Any, args: Case) -> Verdict:
    """The accumulator is int32, as an int8 kernel's is."""
    return _dtype_verdict(got, 0, "acc", (np.int32,),
                          "an int8 kernel accumulates in int32 (return acc as np.int32; int64 "
                          "hides what the 32 bits must hold)")
