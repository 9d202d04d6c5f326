"""Argparse types shared by every command: numbers, lists, choices.

Imports nothing else of the package, so any command module can use it without an import circle.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from typing import Any


def positive(kind: type[int] | type[float]) -> Callable[[str], Any]:
    """An argparse type for a number > 0 of ``kind`` (int or float)."""

    def parse(text: str) -> int | float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"expected a {'whole ' if kind is int else ''}number, got {text!r}") from None
        if not value > 0:  # `not >` also refuses NaN
            raise argparse.ArgumentTypeError(f"must be positive, got {text}")
        return value

    return parse


positive_int = positive(int)


def non_negative(what: str = "number") -> Callable[[str], float]:
    """An argparse type for a float >= 0 (``what``: how the error names it, e.g. 'milliseconds')."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number of {what}, got {text!r}"
                                             ) from None
        if not value >= 0:
            raise argparse.ArgumentTypeError(f"must be 0 or more, got {text}")
        return value

    return parse


def comma_list(choices: Sequence[str], what: str) -> Callable[[str], list[str]]:
    """An argparse type for 'a,b,c' whose items must come from ``choices``."""

    def parse(text: str) -> list[str]:
        items = [item.strip() for item in text.split(",") if item.strip()]
        if not items:
            raise argparse.ArgumentTypeError(f"give at least one {what}")
        unknown = [item for item in items if item not in choices]
        if unknown:
            raise argparse.ArgumentTypeError(
                f"unknown {what} {', '.join(map(repr, unknown))} (choose from "
                f"{', '.join(choices)})")
        return list(dict.fromkeys(items))  # drop repeats, keep order

    return parse


def int_list(text: str) -> list[int]:
    """An argparse type for comma-separated positive whole numbers, sorted, without repeats."""
    try:
        values = [int(t) for t in text.split(",") if t.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated whole numbers, got {text!r}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"sizes must be positive whole numbers, got {text!r}")
    return sorted(set(values))
