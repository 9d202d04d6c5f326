"""Hints that can ship as data: a typical mistake replayed, or a generic rule about the result.

A part's ``hints`` say what a wrong answer probably got wrong. To reach a student's ``check()``
without shipping the oracle, each hint must be data once the visible cases are drawn:

- :class:`Mistake`: ``replay(expected, args)`` computes what the mistake gives (``None`` where
  it does not apply); the hint applies when the result equals it. The replay is private (it is an
  oracle in disguise: a col2im that uses ``=`` where ``+=`` is right is one character from the
  answer), so ``edu-dl assign`` freezes its value on each visible case and only the values ship.
- a :class:`Rule`: a generic test of the result against the expected value and the arguments
  (transposed, a scalar, not finite, a permutation, ...). Its code lives here, in the package,
  and tells nothing about any exercise; only its name and parameters ship. An optional ``when``
  (private: it may look at the oracle's value) is frozen to the set of visible cases where it holds.

The legacy form, a ``(predicate(expected, got, args), message)`` pair, still works wherever the
part file itself is loaded (the grader, the solutions), but cannot ship as data: ``assign``
leaves it out of a release and says so.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np

from edu_dl.grading.protocol import as_array

When = Callable[[Any, tuple[Any, ...]], bool]  # (expected, args) -> does the hint apply here


def close(a: Any, b: Any, rtol: float = 1e-6, atol: float = 1e-8) -> bool:
    """Same shape and np.allclose (exact for rtol = atol = 0); False for anything not numeric."""
    try:
        x, y = as_array(a), as_array(b)
        if x.shape != y.shape:
            return False
        if x.dtype.kind not in "biuf" or y.dtype.kind not in "biuf":
            return bool(np.array_equal(x, y))
        return bool(np.allclose(x.astype(np.float64), y.astype(np.float64), rtol=rtol,
                                atol=atol, equal_nan=True))
    except Exception:  # a result that cannot be compared does not look like the mistake
        return False


def output_of(value: Any, output: int | None) -> Any:
    """The whole result (``output`` None) or its output ``output`` (IndexError if missing)."""
    if output is None:
        return value
    if not isinstance(value, tuple | list):
        raise IndexError("not a tuple of outputs")
    return value[output]


@dataclass(frozen=True)
class Mistake:
    """A typical mistake, replayed: applies when the result (or its output ``output``, seen
    through ``view``) is close to ``replay(expected, args)``. ``replay`` returns None where the
    mistake would give the right answer or does not apply."""

    replay: Callable[[Any, tuple[Any, ...]], Any]
    message: str
    output: int | None = None
    rtol: float = 1e-6
    atol: float = 1e-8
    view: Callable[[Any], Any] | None = None  # public code: what of the result to compare

    def value(self, expected: Any, args: tuple[Any, ...]) -> Any:
        """What the mistake gives on this case (the frozen form looks it up); None where the
        replay cannot run on it (a replay that raises does not apply there)."""
        try:
            return self.replay(expected, args)
        except Exception:
            return None

    def applies(self, expected: Any, got: Any, args: tuple[Any, ...]) -> bool:
        wrong = self.value(expected, args)
        if wrong is None:
            return False
        try:
            mine = output_of(got, self.output)
            if self.view is not None:
                mine = self.view(mine)
        except Exception:
            return False
        if isinstance(wrong, tuple) and isinstance(mine, tuple | list):
            return len(wrong) == len(mine) and all(
                close(w, m, self.rtol, self.atol) for w, m in zip(wrong, mine))
        return close(mine, wrong, self.rtol, self.atol)


@dataclass(frozen=True)
class FrozenMistake(Mistake):
    """A Mistake as a release carries it: its value on each visible case, by the case's key
    (``case_key``); no value: the mistake does not apply there."""

    values: Mapping[bytes, Any] = field(default_factory=dict)

    def value(self, expected: Any, args: tuple[Any, ...]) -> Any:
        return self.values.get(case_key(args))


def case_key(args: tuple[Any, ...]) -> bytes:
    """A case's identity by value (dtype, shape and bytes of each argument): how a release
    finds what it froze for the case a check draws."""
    h = hashlib.sha256()
    for arg in args:
        a = np.asarray(arg)
        h.update(f"{a.dtype.str}{a.shape}|".encode())
        h.update(np.ascontiguousarray(a).tobytes() if a.dtype.kind != "O" else repr(arg).encode())
    return h.digest()


# --------------------------------------------------------------------------- rules


@dataclass(frozen=True)
class Rule:
    """A generic test of a result; subclasses define :meth:`test` and data-only fields.

    ``output`` picks one output of a tuple result (None: the whole result); ``when`` (private,
    frozen per visible case by ``assign``) limits the rule to the cases where it makes sense."""

    message: str
    output: int | None = None
    when: When | frozenset[bytes] | None = None  # frozen: the keys of the cases it applies to

    def test(self, expected: Any, got: Any, args: tuple[Any, ...]) -> bool:
        raise NotImplementedError

    def applies(self, expected: Any, got: Any, args: tuple[Any, ...]) -> bool:
        if isinstance(self.when, frozenset):
            if case_key(args) not in self.when:
                return False
        elif self.when is not None and not self.when(expected, args):
            return False
        try:
            return bool(self.judge(expected, got, args))
        except Exception:  # a rule that cannot judge this answer simply does not apply
            return False

    def judge(self, expected: Any, got: Any, args: tuple[Any, ...]) -> bool:
        """The test on the chosen output of both results."""
        return self.test(output_of(expected, self.output), output_of(got, self.output), args)

    def params(self) -> dict[str, Any]:
        """The rule's own data (everything but message, output, when): what a release stores."""
        skip = {"message", "output", "when"}
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name not in skip}


@dataclass(frozen=True)
class Scalar(Rule):
    """A single number where an array is expected (a reduction too many)."""

    def test(self, expected: Any, got: Any, args: tuple[Any, ...]) -> bool:
        return np.ndim(got) == 0 and np.ndim(expected) != 0


@dataclass(frozen=True)
class NotScalar(Rule):
    """An array where a single number is expected (a reduction missing)."""

    def test(self, expected: Any, got: Any, args: tuple[Any, ...]) -> bool:
        return np.ndim(got) != 0 and np.ndim(expected) == 0


@dataclass(frozen=True)
class Transposed(Rule):
    """The expected shape reversed (and it is not square)."""

    def test(self, expected: Any, got: Any, args: tuple[Any, ...]) -> bool:
        e, g = np.shape(expected), np.shape(got)
        return g == e[::-1] != e


@dataclass(frozen=True)
class TransposedValues(Rule):
    """The expected values, transposed."""

    def test(self, expected: Any, got: Any, args: tuple[Any, ...]) -> bool:
        e = as_array(expected)
        return e.ndim == 2 and e.shape[0] != e.shape[1] and close(got, e.T)


@dataclass(frozen=True)
class NonFinite(Rule):
    """inf or nan anywhere in the result."""

    def test(self, expected: Any, got: Any, args: tuple[Any, ...]) -> bool:
        outputs = got if isinstance(got, tuple | list) else (got,)
        return not all(np.all(np.isfinite(as_array(g).astype(np.float64))) for g in outputs)


@dataclass(frozen=True)
class DtypeKind(Rule):
    """The result's dtype is of kind ``kind`` ('b' bool, 'i' int, 'f' float, 'U' string)."""

    kind: str = "b"

    def test(self, expected: Any, got: Any, args: tuple[Any, ...]) -> bool:
        return as_array(got).dtype.kind == self.kind != as_array(expected).dtype.kind


@dataclass(frozen=True)
class Equals(Rule):
    """The result is exactly ``value`` (a string or a number) and that is wrong."""

    value: Any = None

    def test(self, expected: Any, got: Any, args: tuple[Any, ...]) -> bool:
        return bool(got == self.value) and not bool(expected == self.value)


@dataclass(frozen=True)
class StartsWith(Rule):
    """The result is a string starting with one of ``prefixes`` (and that is wrong)."""

    prefixes: tuple[str, ...] = ()

    def test(self, expected: Any, got: Any, args: tuple[Any, ...]) -> bool:
        text = str(got)
        return text != str(expected) and any(text.startswith(p) for p in self.prefixes)


@dataclass(frozen=True)
class OneOf(Rule):
    """The result is one of ``values`` (and not the expected one)."""

    values: tuple[Any, ...] = ()

    def test(self, expected: Any, got: Any, args: tuple[Any, ...]) -> bool:
        return any(close(got, v, 0.0, 0.0) for v in self.values) and not close(
            got, expected, 0.0, 0.0)


@dataclass(frozen=True)
class Scaled(Rule):
    """The result is ``factor`` times the expected one (a unit, a mean for a sum, a factor 2)."""

    factor: float = 1.0
    rtol: float = 1e-6

    def test(self, expected: Any, got: Any, args: tuple[Any, ...]) -> bool:
        e = as_array(expected).astype(np.float64)
        return bool(np.any(e != 0)) and close(got, self.factor * e, self.rtol, 0.0)


@dataclass(frozen=True)
class Permuted(Rule):
    """The right values in another order."""

    axis: int | None = None

    def test(self, expected: Any, got: Any, args: tuple[Any, ...]) -> bool:
        e, g = as_array(expected), as_array(got)
        if self.axis is None:
            e, g = e.ravel(), g.ravel()
        return not close(g, e) and close(np.sort(g, axis=self.axis or 0),
                                         np.sort(e, axis=self.axis or 0))


@dataclass(frozen=True)
class Shorter(Rule):
    """Fewer items than expected (a last partial batch dropped, a loop one short)."""

    def test(self, expected: Any, got: Any, args: tuple[Any, ...]) -> bool:
        return len(got) < len(expected)


@dataclass(frozen=True)
class Longer(Rule):
    """More items than expected."""

    def test(self, expected: Any, got: Any, args: tuple[Any, ...]) -> bool:
        return len(got) > len(expected)


@dataclass(frozen=True)
class Less(Rule):
    """A number smaller than the expected one."""

    def test(self, expected: Any, got: Any, args: tuple[Any, ...]) -> bool:
        return float(got) < float(expected)


@dataclass(frozen=True)
class Greater(Rule):
    """A number larger than the expected one."""

    def test(self, expected: Any, got: Any, args: tuple[Any, ...]) -> bool:
        return float(got) > float(expected)


@dataclass(frozen=True)
class Arity(Rule):
    """Not a tuple of ``count`` outputs."""

    count: int = 2

    def test(self, expected: Any, got: Any, args: tuple[Any, ...]) -> bool:
        return not isinstance(got, tuple | list) or len(got) != self.count


@dataclass(frozen=True)
class OutputIs(Rule):
    """Output ``output`` holds what belongs in output ``other`` (outputs swapped or repeated)."""

    other: int = 0

    def judge(self, expected: Any, got: Any, args: tuple[Any, ...]) -> bool:
        other = output_of(expected, self.other)
        return self.output is not None and not close(output_of(expected, self.output), other) \
            and close(output_of(got, self.output), other)


@dataclass(frozen=True)
class EqualsArgument(Rule):
    """The result (or an output) is argument ``argument`` unchanged (an input passed through)."""

    argument: int = 0

    def test(self, expected: Any, got: Any, args: tuple[Any, ...]) -> bool:
        return not close(expected, args[self.argument]) and close(got, args[self.argument])


@dataclass(frozen=True)
class SumsTo(Rule):
    """The result sums to ``total`` along ``axis`` (e.g. a softmax over the wrong axis)."""

    total: float = 1.0
    axis: int = 0

    def test(self, expected: Any, got: Any, args: tuple[Any, ...]) -> bool:
        return bool(np.allclose(np.sum(as_array(got), axis=self.axis), self.total))


@dataclass(frozen=True)
class Stripped(Rule):
    """A string equal to the expected one once surrounding whitespace is stripped."""

    def test(self, expected: Any, got: Any, args: tuple[Any, ...]) -> bool:
        return isinstance(got, str) and got != expected and got.strip() == expected


def is_hint(hint: Any) -> bool:
    """A hint object (Mistake or Rule), as opposed to a legacy (predicate, message) pair."""
    return isinstance(hint, Mistake | Rule)


def hint_id(hint: Any, index: int) -> str:
    """A hint's identifier in the gradebook's ``hint`` column: its place among the part's hints
    (from 1) and its kind, e.g. ``2:Transposed`` or ``1:Mistake`` (``pair`` for the legacy
    form). It names the typical mistake, never a value of a case; it stays the same as long as
    the part's hints keep their order."""
    kind = type(hint).__name__ if is_hint(hint) else "pair"
    return f"{index + 1}:{kind.removeprefix('Frozen')}"


def first_hint_found(hints: tuple[Any, ...], expected: Any, got: Any, args: tuple[Any, ...],
                     output: int | None = None) -> tuple[str, str] | None:
    """(:func:`hint_id`, message) of the first hint that applies to this answer, or None.

    ``output``: the output of a tuple result that failed; then only hints about that output,
    or about the whole result, are asked (a hint explains the output the report names)."""
    for index, hint in enumerate(hints):
        if output is not None and getattr(hint, "output", None) not in (None, output):
            continue
        if is_hint(hint):
            if hint.applies(expected, got, args):
                return hint_id(hint, index), str(hint.message)
            continue
        predicate, message = hint
        try:
            if predicate(expected, got, args):
                return hint_id(hint, index), str(message)
        except Exception:  # a hint that cannot judge this answer simply does not apply
            continue
    return None


def first_hint(hints: tuple[Any, ...], expected: Any, got: Any, args: tuple[Any, ...],
               output: int | None = None) -> str | None:
    """The message of the first hint that applies to this answer (about ``output``), or None."""
    found = first_hint_found(hints, expected, got, args, output)
    return found[1] if found else None
