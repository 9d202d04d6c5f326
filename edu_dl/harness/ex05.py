"""Exercise 5 (the GPU memory system), public half: how the fused layer norm is called, and
the source checks. Nothing here computes an answer.

``call_compiled`` runs the student's function and, as check()'s feedback only, says when it is
not compiled by Numba. The grader judges the same from the submitted source: the function is
decorated with ``@njit`` (or ``@numba.jit``) and does not hand its statistics to NumPy's
reductions (a fused kernel computes them in its own loop). The oracles, hidden cases and
mistake replays stay in the private part file.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from edu_dl.grading.authoring.source import AllChecks, all_checks, decorator_names, names_check
from edu_dl.grading.authoring.spec import CheckFailure, Verdict

NOT_COMPILED = ("the values are right, but the function is not compiled: decorate it with "
                "@njit (from numba), so that its loops run as one pass of machine code")
REDUCTIONS = ("compute the row's statistics in your own loop: NumPy's mean, var and std are "
              "separate passes over the row, which is what a fused kernel avoids")


@dataclass(frozen=True)
class NjitCheck:
    """A source check: the definition is decorated with Numba's ``njit`` or ``jit`` (``@njit``,
    ``@numba.njit(...)``, ``@jit(nopython=True)``). Data only."""

    def __call__(self, source: str) -> Verdict:
        if any(name.split(".")[-1] in ("njit", "jit") for name in decorator_names(source)):
            return Verdict(True)
        return Verdict(False, "the function is not compiled: decorate it with @njit (from "
                              "numba)")


FUSED_SOURCE: AllChecks = all_checks(
    NjitCheck(), names_check(forbidden=[(("mean", "var", "std", "nanmean", "nanvar", "nanstd"),
                                         REDUCTIONS)]))


def call_compiled(fn: Callable[..., Any], args: tuple[Any, ...]) -> Any:
    """Run fn on the case; then, as feedback, refuse a function Numba did not compile."""
    result = fn(*args)
    if getattr(fn, "py_func", None) is None:
        raise CheckFailure(NOT_COMPILED)
    return result
