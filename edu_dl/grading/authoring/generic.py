"""Generic hints: the shapes of mistakes any numeric output can show, with no per-part work.

``judge_case`` asks :func:`generic_hint` when none of a part's own hints explains a wrong output.
Each test compares the wrong output with the expected one (and, for a reduction, with the
case's arguments) and says what it found: a constant factor (an integer, its inverse, or a
dimension of the inputs), a flipped sign, values off by one (in value or in position), one entry
short or too many, the right values transposed or in another order, a reduction over another
axis. Each test asks for an exact relation (to a tight tolerance), so random wrong values never
match one. The messages name factors, axes and shapes, never a value (hidden cases show them).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

MAX_SIZE = 1 << 20  # larger outputs get no generic hint (bounded work on the grader's side)
SMALL_FACTORS = range(2, 11)  # "exactly k times" for these, and for any size of the inputs
Finder = Callable[[np.ndarray, np.ndarray, tuple[Any, ...], tuple[str, ...]], "str | None"]


def _numeric(value: Any) -> np.ndarray | None:
    """The value as a finite float64 array, or None (not numeric, not finite, too large)."""
    try:
        a = np.asarray(value)
        if a.dtype.kind not in "iuf" or a.size > MAX_SIZE:
            return None
        a = a.astype(np.float64)
        return a if np.all(np.isfinite(a)) else None
    except Exception:
        return None


def _tolerance(expected: Any, got: Any) -> float:
    """rtol of an "exact" relation: float32 results round at 1e-7, float64 at 1e-16."""
    single = any(np.asarray(v).dtype in (np.float16, np.float32) for v in (expected, got))
    return 1e-4 if single else 1e-6


def _close(a: np.ndarray, b: np.ndarray, rtol: float) -> bool:
    """Same shape and equal to rtol relative to b's largest magnitude (zeros compare too)."""
    if a.shape != b.shape:
        return False
    scale = float(np.max(np.abs(b), initial=0.0))
    return bool(np.allclose(a, b, rtol=rtol, atol=rtol * scale + 1e-12))


def _dimensions(args: tuple[Any, ...], names: tuple[str, ...]) -> dict[int, str]:
    """Sizes found in the inputs, each with the first name that gives it (x.shape[0], x.size)."""
    found: dict[int, str] = {}
    for j, arg in enumerate(args):
        name = names[j] if j < len(names) else f"arg{j}"
        try:
            shape = np.shape(arg)
        except Exception:
            continue
        for axis, n in enumerate(shape):
            found.setdefault(int(n), f"{name}.shape[{axis}]")
        if len(shape) > 1:
            found.setdefault(int(np.prod(shape[1:])), f"the size of one {name}[i]")
            found.setdefault(int(np.prod(shape)), f"{name}.size")
    return {n: text for n, text in found.items() if n > 1}


def _factor(e: np.ndarray, g: np.ndarray, rtol: float) -> float | None:
    """r with g == r * e everywhere (e not all zero), else None."""
    if e.shape != g.shape:
        return None
    nonzero = np.abs(e) > 1e-12 * float(np.max(np.abs(e), initial=0.0))
    if not nonzero.any():
        return None
    ratio = float(np.median(g[nonzero] / e[nonzero]))
    return ratio if np.isfinite(ratio) and _close(g, ratio * e, rtol) else None


def _integer(x: float, rtol: float) -> int | None:
    k = round(x)
    return k if k != 0 and abs(x - k) <= rtol * abs(k) else None


def scaled(e: np.ndarray, g: np.ndarray, args: tuple[Any, ...], names: tuple[str, ...]
           ) -> str | None:
    """Every value k, 1/k or -1 times the expected one."""
    rtol = _tolerance(e, g)
    ratio = _factor(e, g, rtol)
    if ratio is None or abs(ratio - 1.0) <= rtol:
        return None
    if abs(ratio + 1.0) <= rtol:
        return ("every value has the opposite sign: a minus sign lost or added, or a "
                "difference taken the other way round (b - a for a - b)?")
    dims = _dimensions(args, names)
    sign = "-" if ratio < 0 else ""
    k = _integer(abs(ratio), rtol)
    if k is not None and (k in SMALL_FACTORS or k in dims):
        which = f" (here {k} = {dims[k]})" if k in dims else ""
        return (f"every value is exactly {sign}{k} times the expected one{which}: a sum where "
                "a mean belongs, a division missing, or dividing by the wrong count?")
    k = _integer(1.0 / abs(ratio), rtol)
    if k is not None and (k in SMALL_FACTORS or k in dims):
        which = f" (here {k} = {dims[k]})" if k in dims else ""
        return (f"every value is exactly {sign}1/{k} of the expected one{which}: divided once "
                "too often, or by the wrong count?")
    return None


def off_by_one_value(e: np.ndarray, g: np.ndarray, args: tuple[Any, ...],
                     names: tuple[str, ...]) -> str | None:
    """Every value exactly one more (or one less) than expected."""
    if e.shape != g.shape or e.size == 0:
        return None
    rtol = _tolerance(e, g)
    for step, word in ((1.0, "more"), (-1.0, "less")):
        if _close(g, e + step, rtol) and not _close(g, e, rtol):
            return (f"every value is exactly 1 {word} than expected: an index or count off by "
                    "one (counting from 1, or a range one too long/short)?")
    return None


def _along(a: np.ndarray, axis: int, part: slice) -> np.ndarray:
    index = [slice(None)] * a.ndim
    index[axis] = part
    return a[tuple(index)]


def shifted(e: np.ndarray, g: np.ndarray, args: tuple[Any, ...], names: tuple[str, ...]
            ) -> str | None:
    """The expected values moved one position along an axis (an off-by-one index or window)."""
    if e.shape != g.shape or e.ndim == 0:
        return None
    rtol = _tolerance(e, g)
    for axis, n in enumerate(e.shape):
        if n < 3:
            continue
        head, tail = slice(None, -1), slice(1, None)
        if _close(_along(e, axis, tail), _along(e, axis, head), rtol):
            continue  # e does not change along this axis: a shift would prove nothing
        for got_part, want_part, way in ((tail, head, "one position later"),
                                         (head, tail, "one position earlier")):
            if _close(_along(g, axis, got_part), _along(e, axis, want_part), rtol):
                return (f"the right values, each {way} along axis {axis}: an index or window "
                        "off by one (range(1, n) for range(n), i + 1 for i)?")
    return None


def one_short_or_long(e: np.ndarray, g: np.ndarray, args: tuple[Any, ...],
                      names: tuple[str, ...]) -> str | None:
    """One entry fewer or more along one axis (a loop, a window count or a size off by one)."""
    if e.ndim != g.ndim or e.ndim == 0:
        return None
    differ = [axis for axis in range(e.ndim) if e.shape[axis] != g.shape[axis]]
    if len(differ) != 1 or abs(e.shape[differ[0]] - g.shape[differ[0]]) != 1:
        return None
    axis = differ[0]
    word = "short" if g.shape[axis] < e.shape[axis] else "too many"
    return (f"one entry {word} along axis {axis} ({g.shape[axis]} where {e.shape[axis]} are "
            "expected): a range, a loop or an output size off by one (e.g. (H - k) // s + 1 "
            "windows)?")


def transposed(e: np.ndarray, g: np.ndarray, args: tuple[Any, ...], names: tuple[str, ...]
               ) -> str | None:
    """The expected values with their axes in another order."""
    if e.ndim < 2 or e.ndim > 4 or e.size != g.size or e.ndim != g.ndim:
        return None
    rtol = _tolerance(e, g)
    for order in itertools.permutations(range(e.ndim)):
        if order == tuple(range(e.ndim)):
            continue
        moved = np.transpose(e, order)
        if moved.shape == g.shape and _close(g, moved, rtol) and not (
                g.shape == e.shape and _close(g, e, rtol)):
            what = "transposed" if e.ndim == 2 else f"with the axes in the order {order}"
            return (f"the right values, {what}: an index order mixed up, a .T too many or too "
                    "few, or a reshape where a transpose belongs?")
    return None


REDUCTIONS: tuple[tuple[str, Callable[..., Any]], ...] = (
    ("sum", np.sum), ("mean", np.mean), ("max", np.max), ("min", np.min))


def _reductions(a: np.ndarray) -> Iterator[tuple[str, int | None, np.ndarray]]:
    for name, op in REDUCTIONS:
        yield name, None, np.asarray(op(a))
        for axis in range(a.ndim):
            yield name, axis, op(a, axis=axis)


def other_axis(e: np.ndarray, g: np.ndarray, args: tuple[Any, ...], names: tuple[str, ...]
               ) -> str | None:
    """The expected value is a reduction of an input over one axis; the answer, over another."""
    rtol = _tolerance(e, g)
    for j, arg in enumerate(args):
        a = _numeric(arg)
        if a is None or a.ndim < 2 or a.size > MAX_SIZE // 8:
            continue
        name = names[j] if j < len(names) else f"arg{j}"
        found = list(_reductions(a))
        right = [(op, axis) for op, axis, r in found
                 if e.size == r.size and _close(e.reshape(r.shape), r, rtol)]
        for op, axis in right:
            for other_op, other, r in found:
                if other_op != op or other == axis or g.size != r.size:
                    continue
                if _close(g.reshape(r.shape), r, rtol):
                    said = "every axis" if other is None else f"axis {other}"
                    want = "every axis" if axis is None else f"axis {axis}"
                    return (f"that is the {op} of {name} over {said}; the expected one is over "
                            f"{want} (axis=..., keepdims=...)")
    return None


def permuted(e: np.ndarray, g: np.ndarray, args: tuple[Any, ...], names: tuple[str, ...]
             ) -> str | None:
    """The right values, in another order."""
    if e.size != g.size or e.size < 2 or len(np.unique(e)) < 2:
        return None
    rtol = _tolerance(e, g)
    if e.shape == g.shape and _close(g, e, rtol):
        return None
    if _close(np.sort(g, axis=None), np.sort(e, axis=None), rtol):
        return ("the right values in another order: an index, an axis or a reshape mixed "
                "up?")
    return None


FINDERS: tuple[Finder, ...] = (scaled, off_by_one_value, shifted, one_short_or_long,
                               transposed, other_axis, permuted)


def generic_hint(expected: Any, got: Any, args: tuple[Any, ...] = (),
                 names: tuple[str, ...] = ()) -> str | None:
    """What shape of mistake a wrong numeric output shows, or None (never raises)."""
    e, g = _numeric(expected), _numeric(got)
    if e is None or g is None:
        return None
    for finder in FINDERS:
        try:
            found = finder(e, g, args, names)
        except Exception:  # a test that cannot judge this answer simply finds nothing
            continue
        if found:
            return found
    return None
