"""Exercise 15, the shoot-out: how its parts judge a student's function.

Public code (a release names it by ``edu_dl.harness.ex15:<name>``), and it computes no answer:
every part calls the function plainly and compares by ``tolerance(...)``; what lives here is
what the hints look at in a result (its first output) and one generic rule. The oracles
(``torch.optim.Adam``, PyTorch's losses, the twins' loss scales) and the mistake replays stay
in the course's private part file.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from edu_dl.grading.authoring.hints import Rule


def first_output(got: Any) -> Any:
    """The first output of a tuple result, else the result itself (a Mistake's view: the new
    parameter of an Adam step, whether the moments came with it or not)."""
    return got[0] if isinstance(got, tuple) else got


@dataclass(frozen=True)
class SeveralOutputs(Rule):
    """A tuple (or list) of outputs where one value is expected."""

    def test(self, expected: Any, got: Any, args: tuple[Any, ...]) -> bool:
        return isinstance(got, tuple | list) and not isinstance(expected, tuple | list)
