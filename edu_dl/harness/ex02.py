"""Exercise 2 (CPU vs GPU), public half: how softmax_xp is called, and the source checks.
Nothing here computes an answer.

``call_device_agnostic`` runs the student's function and, as check()'s feedback only, looks at
the names its code reads (``get_xp``, never ``np``); the grader judges the same from the
submitted source with :data:`XP_SOURCE`. :data:`INTENSITY_SOURCE` keeps matmul_intensity from
handing the part to ``edu_dl.machine.hardware``, which computes the same value. The formulas, the
hidden cases and the mistake replays stay in the private part file.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from edu_dl.grading.authoring.source import NamesCheck, names_check
from edu_dl.grading.authoring.spec import CheckFailure, global_names

NAMES_NUMPY = ("the function still names NumPy (np.…): write xp.exp, xp.sum, … with "
               "xp = edu_dl.get_xp(x), so the same code runs on CuPy arrays on a GPU")
NO_GET_XP = "the function never calls edu_dl.get_xp(x): take the array namespace from the input"
XP_SOURCE: NamesCheck = names_check(required=[(("get_xp",), NO_GET_XP)],
                                    forbidden=[(("np", "numpy"), NAMES_NUMPY)])
CALLS_INTENSITY = ("this part asks you to count the FLOPs and the bytes yourself (do not call "
                   "edu_dl.machine.hardware.matmul_intensity or matmul_flops)")
INTENSITY_SOURCE: NamesCheck = names_check(forbidden=[(("matmul_intensity", "matmul_flops"),
                                                       CALLS_INTENSITY)])


def call_device_agnostic(fn: Callable[..., Any], args: tuple[Any, ...]) -> Any:
    """Run fn, then check it takes its namespace from get_xp, not from NumPy by name."""
    result = fn(*args)
    code = getattr(fn, "__code__", None)
    if code is not None:
        names = global_names(code)
        if names & {"np", "numpy"}:
            raise CheckFailure(f"the values are right, but {NAMES_NUMPY}")
        if "get_xp" not in names:
            raise CheckFailure(NO_GET_XP)
    return result
