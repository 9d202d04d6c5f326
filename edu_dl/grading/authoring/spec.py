"""The Part spec: what a graded part is, and how a result is judged against its oracle.

A :class:`Part` is trusted code: the grader runs its ``cases``, ``expected``, ``compare``,
``result_check`` and ``source_check`` outside the sandbox; only ``call`` runs beside the student's
code (and so decides nothing). ``check()`` (``checking.py``) runs the same judgement in the
student's own process for instant feedback.
"""

from __future__ import annotations

import math
import re
import types
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from edu_dl.grading.authoring.generic import generic_hint
from edu_dl.grading.authoring.hints import Mistake, Rule, first_hint_found
from edu_dl.grading.authoring.withhold import withheld
from edu_dl.grading.protocol import as_array as _as_array
from edu_dl.grading.protocol import roundtrip

MAX_SHOWN = 3  # differing entries shown in a message


@dataclass(frozen=True)
class Verdict:
    """A comparison's outcome: ok, and a message that says what differs (empty when ok)."""

    ok: bool
    message: str = ""
    hint: str = ""  # the hint that recognised the mistake (hints.hint_id), if one did
    output: int | None = None  # the output of a tuple result that failed, where known

    def __bool__(self) -> bool:
        return self.ok


# --------------------------------------------------------------------------- withheld values


@dataclass(frozen=True)
class Withheld:
    """A value of a case that only the oracle gets: the labels of a held-out set, say, which
    a student's model is judged against but must never see. A part's ``cases`` may put one
    anywhere in a case; the student's function, the sandbox's inputs, a release, ``hints``,
    ``result_check`` and every message get the case without it (:func:`given`), and
    ``expected`` gets it unwrapped, in its place (:func:`oracle`). It is drawn and kept on the
    grader's side only, so a hidden case's withheld values never leave it."""

    value: Any


def given(args: tuple[Any, ...]) -> tuple[Any, ...]:
    """The case as the student's function gets it: without its withheld values."""
    return tuple(a for a in args if not isinstance(a, Withheld))


def oracle(part: Part, args: tuple[Any, ...]) -> Any:
    """``part.expected`` on the whole case, each withheld value unwrapped in its place."""
    return part.expected(*(a.value if isinstance(a, Withheld) else a for a in args))


def rejoin(shown: tuple[Any, ...], like: tuple[Any, ...]) -> tuple[Any, ...]:
    """``like`` (a whole case) with its given values replaced by ``shown``'s, in order: the
    values exactly as the student's function got them, the withheld ones as they were."""
    if len(shown) != len(given(like)):
        raise ValueError(f"rejoin: {len(shown)} given values for a case that gives "
                         f"{len(given(like))}")
    rest = iter(shown)
    return tuple(a if isinstance(a, Withheld) else next(rest) for a in like)


def judged_cases(drawn: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """Whole cases as a judge reads them: each given value exactly as the student's code gets
    it (through the wire format), each withheld one as it was drawn."""
    shown = roundtrip([given(case) for case in drawn])
    return [rejoin(values, case) for values, case in zip(shown, drawn)]


# --------------------------------------------------------------------------- comparing


def _kind(a: np.ndarray) -> str:
    """'number' for int/uint/float (they compare with each other), else the kind's name."""
    if a.dtype.kind in "iuf":
        return "number"
    return {"b": "bool", "c": "complex", "U": "string", "S": "bytes", "O": "object"}.get(
        a.dtype.kind, a.dtype.kind)


def _fmt(x: Any) -> str:
    """A number or string for a message: floats to 6 significant digits."""
    x = x.item() if hasattr(x, "item") and np.ndim(x) == 0 else x
    if isinstance(x, float):
        return f"{x:.6g}"
    text = repr(x)
    # A long argument (a whole /proc/cpuinfo, say) would bury the message: show its start.
    return text if len(text) <= 60 else f"{text[:45]}... ({len(text)} characters)"


def compare_arrays(expected: Any, got: Any, rtol: float = 1e-6, atol: float = 1e-8) -> Verdict:
    """One output: same shape and kind, then |got - expected| <= atol + rtol * |expected|."""
    e = _as_array(expected)
    try:
        g = _as_array(got)
    except Exception as exc:
        return Verdict(False, f"got a {type(got).__name__} that is not an array ({exc})")
    if g.dtype.kind == "O":
        return Verdict(False, f"expected an array of shape {e.shape}, got a {type(got).__name__}")
    if e.shape != g.shape:
        return Verdict(False, f"expected shape {e.shape}, got shape {g.shape}")
    if _kind(e) != _kind(g):
        return Verdict(False, f"expected {_kind(e)} values ({e.dtype}), got {_kind(g)} ({g.dtype})")
    if _kind(e) != "number":
        bad = e != g
    else:
        e64, g64 = e.astype(np.float64), g.astype(np.float64)
        bad = ~np.isclose(g64, e64, rtol=rtol, atol=atol, equal_nan=True)
    if not np.any(bad):
        return Verdict(True)
    if e.ndim == 0:
        return Verdict(False, f"expected {_fmt(e)}, got {_fmt(g)}")
    # One fact a line (the counts first: ``withhold`` keeps that line alone for hidden cases);
    # check() wraps long lines at spaces only, so no number is ever split.
    first = f"{int(np.count_nonzero(bad))} of {e.size} entries differ"
    lines = []
    if _kind(e) == "number":
        if not np.all(np.isfinite(g64)):
            first += f"; got contains {int(np.count_nonzero(~np.isfinite(g64)))} inf/nan"
        err = np.abs(g64 - e64)
        finite = np.isfinite(err)
        if finite.any():
            # CS231n's relative error, |e - g| / max(1e-8, |e| + |g|): at most 1, also at e == 0
            rel = err[finite] / np.maximum(1e-8, np.abs(e64[finite]) + np.abs(g64[finite]))
            lines.append(f"max abs error {err[finite].max():.3g}, max rel error {rel.max():.3g} "
                         f"(tolerance: atol={atol:g} + rtol={rtol:g} * |expected|)")
    lines += [f"[{', '.join(map(str, idx))}]: expected {_fmt(e[tuple(idx)])} vs got "
              f"{_fmt(g[tuple(idx)])}" for idx in np.argwhere(bad)[:MAX_SHOWN]]
    return Verdict(False, "\n  ".join([first, *lines]))


def default_compare(expected: Any, got: Any, rtol: float = 1e-6, atol: float = 1e-8) -> Verdict:
    """Tuples output by output, arrays and numbers by shape, kind and np.isclose(rtol, atol)."""
    if isinstance(expected, tuple):
        if not isinstance(got, tuple | list):
            return Verdict(False, f"expected a tuple of {len(expected)} outputs, got a "
                                  f"{type(got).__name__}")
        if len(got) != len(expected):
            return Verdict(False, f"expected {len(expected)} outputs, got {len(got)}")
        for j, (e, g) in enumerate(zip(expected, got)):
            verdict = compare_arrays(e, g, rtol, atol)
            if not verdict.ok:
                return Verdict(False, f"output {j}: {verdict.message}", output=j)
        return Verdict(True)
    return compare_arrays(expected, got, rtol, atol)


@dataclass(frozen=True)
class Tolerance:
    """default_compare with a part's own tolerances (data, so a release can carry it)."""

    rtol: float = 1e-6
    atol: float = 1e-8

    def __call__(self, expected: Any, got: Any) -> Verdict:
        return default_compare(expected, got, rtol=self.rtol, atol=self.atol)


def tolerance(rtol: float = 1e-6, atol: float = 1e-8) -> Tolerance:
    """default_compare with a part's own tolerances."""
    return Tolerance(rtol, atol)


@dataclass(frozen=True)
class Accuracy:
    """A classifier's labels judged by the share that is right: at least ``at_least`` of them
    must equal the expected ones (data, so a release carries it). For a part whose expected
    result is the true labels of a held-out set, withheld from the student (:class:`Withheld`).
    """

    at_least: float

    def __post_init__(self) -> None:
        if not 0.0 < self.at_least <= 1.0:
            raise ValueError(f"Accuracy(at_least={self.at_least}): a share in (0, 1]")

    def __call__(self, expected: Any, got: Any) -> Verdict:
        e, g = np.asarray(expected), _as_array(got)
        if g.shape != e.shape:
            scores = g.ndim == e.ndim + 1 and g.shape[:-1] == e.shape
            return Verdict(False, f"expected {e.size:,} labels (shape {e.shape}), got shape "
                           f"{g.shape}" + (": one label per row, the class with the highest "
                                           "score, not the scores" if scores else ""))
        whole = g.dtype.kind in "iub" or (g.dtype.kind == "f" and bool(np.isfinite(g).all())
                                          and bool((g == np.round(g)).all()))
        if not whole:
            return Verdict(False, f"expected whole-number labels, got {g.dtype} values that "
                           "are not")
        right = int(np.count_nonzero(g == e))
        needed = math.ceil(self.at_least * e.size - 1e-9)  # 0.07 * 100 is 7.000000000000001
        if right >= needed:
            return Verdict(True)
        return Verdict(False, f"accuracy {right / e.size:.3f} ({right:,} of {e.size:,} right), "
                       f"under the {self.at_least:g} this part asks for ({needed:,} right)")


def plain_call(fn: Callable[..., Any], args: tuple[Any, ...]) -> Any:
    """How a function meets its arguments unless a part says otherwise: fn(*args)."""
    return fn(*args)


# A hint: a Mistake or a Rule (``hints.py``: what a release can carry as data), or the legacy
# (predicate(expected, got, args), message) pair.
Hint = Mistake | Rule | tuple[Callable[[Any, Any, tuple[Any, ...]], bool], str]


@dataclass(frozen=True)
class Part:
    """One graded part: its cases, the oracle, how to compare, and hints for typical mistakes.

    What decides the grade is judged outside the student's process (``judge.judge``), from data
    only: ``compare`` (the raw result against the oracle), ``result_check`` (the raw result
    against the case's arguments, for answers an oracle value cannot pin down) and
    ``source_check`` (the submitted source of the checked function, for parts that judge *how*
    an answer was computed). ``call`` runs inside the student's process, so whatever it checks
    or counts there is feedback for ``check()`` only: ``feedback_outputs`` names the outputs
    it observes (counts, flags), which the grader ignores.
    """

    id: str
    points: float
    cases: Callable[[np.random.Generator, bool], list[tuple[Any, ...]]]
    expected: Callable[..., Any]
    compare: Callable[[Any, Any], Verdict] = default_compare
    hints: tuple[Hint, ...] = ()
    call: Callable[[Callable[..., Any], tuple[Any, ...]], Any] = plain_call
    timeout_s: float = 10.0
    arg_names: tuple[str, ...] = ()  # only for messages: "dout (3, 4), x (3, 4)"
    output_names: tuple[str, ...] = ()  # only for messages: "output 1 (dw)"
    result_check: Callable[[Any, tuple[Any, ...]], Verdict] | None = None  # (got, args)
    source_check: Callable[[str], Verdict] | None = None  # the checked function's source text
    feedback_outputs: tuple[int, ...] = ()  # outputs observed in the sandbox: check() only
    # True: the points split over the cases, visible and hidden together (judge.case_points);
    # False: all or nothing
    partial: bool = False
    # Parts whose student functions this one calls (e.g. conv_forward uses im2col): a failure
    # here says first that one of those fails its own check. "ex08.tape_ops@Tape" names the
    # object the part checks where its name is not the part's (uses_named splits it).
    uses: tuple[str, ...] = ()
    in_place: bool = False  # True: writing into the arguments is the contract (check() allows it)
    generic_hints: bool = True  # after the part's own hints: generic.generic_hint


def uses_named(entry: str) -> tuple[str, str]:
    """(part id, name of the student's object it checks) of a ``Part.uses`` entry:
    'ex08.tape_ops@Tape' -> ('ex08.tape_ops', 'Tape'); 'ex11.im2col' -> ('ex11.im2col',
    'im2col')."""
    part_id, _, name = entry.partition("@")
    return part_id, name or part_id.partition(".")[2]


# Fields added after the first release format: a release writes them only when they differ from
# their defaults, so releases frozen before them stay byte for byte the same.
LATER_FIELDS = ("uses", "in_place", "generic_hints")


def describe_case(part: Part, index: int, n_cases: int, args: tuple[Any, ...],
                  hidden: bool = False) -> str:
    """'case 2 of 4 (dout (3, 5), x (3, 4))': the failing case, by its arguments' shapes;
    a hidden case's scalars by their kind alone: 'hidden case 5 of 7 (n (a number))'."""
    shown = []
    for j, arg in enumerate(args):
        name = part.arg_names[j] if j < len(part.arg_names) else f"arg{j}"
        a = np.asarray(arg)
        shown.append(f"{name} {a.shape}" if a.ndim else f"{name} (a {_kind(a)})" if hidden
                     else f"{name}={_fmt(a)}")
    return f"{'hidden case' if hidden else 'case'} {index + 1} of {n_cases} ({', '.join(shown)})"


def failed_output(verdict: Verdict) -> int | None:
    """Which output of a tuple result failed: the verdict's own ``output``, else the "output j:"
    a part's own compare may start its message with (None: unknown, or not a tuple)."""
    if verdict.output is not None:
        return verdict.output
    match = OUTPUT_PREFIX.match(verdict.message)
    return int(match[1]) if match else None


OUTPUT_PREFIX = re.compile(r"output (\d+)\b")


GENERIC = "generic"  # the gradebook's hint id of a generic hint (generic.py)
# The gradebook's hint ids of the guard's failures (guard.judged), and what the class report
# says about them.
WROTE_HINT, ALIASED_HINT = "wrote", "aliased"
GUARD_HINTS = {WROTE_HINT: "the guard: the function wrote into an argument (the caller's "
                           "input) in place",
               ALIASED_HINT: "the guard: a result is the caller's array itself, not a new one"}


def _first_hint(part: Part, expected: Any, got: Any, args: tuple[Any, ...],
                output: int | None = None, generic: bool = True) -> tuple[str, str] | None:
    """(hint id, message): the part's first hint about ``output`` (or the whole result), then
    a generic one."""
    found = first_hint_found(part.hints, expected, got, args, output=output)
    if found or not generic or not part.generic_hints:
        return found
    try:
        if isinstance(expected, tuple):
            if output is None or not isinstance(got, tuple | list) or len(got) != len(expected):
                return None
            expected, got = expected[output], got[output]
        message = generic_hint(expected, got, args, part.arg_names)
        return (GENERIC, message) if message else None
    except Exception:  # a hint never costs the verdict
        return None


def _explained_elsewhere(part: Part, expected: Any, got: Any, args: tuple[Any, ...],
                         output: int, verdict: Verdict
                         ) -> tuple[Verdict, tuple[str, str] | None]:
    """When no hint explains the reported output of a tuple result, but one of the part's hints
    explains another output that fails too: that output's verdict and hint (the report then
    names the output its hint is about). Else the verdict as it was, and no hint."""
    if not isinstance(expected, tuple) or not isinstance(got, tuple | list) or \
            len(got) != len(expected):
        return verdict, None
    for j in range(len(expected)):
        if j == output or not any(getattr(h, "output", None) == j for h in part.hints):
            continue
        alone = tuple(g if k == j else e for k, (e, g) in enumerate(zip(expected, got)))
        mine = part.compare(expected, alone)  # output j alone wrong: does it fail, and how?
        if mine.ok or failed_output(mine) != j:
            continue
        found = first_hint_found(part.hints, expected, got, args, output=j)
        if found:
            return mine, found
    return verdict, None


# A result may hold at most this many times the values of the expected one (plus a slack for
# short answers): a far larger one fails at once, before any comparison or hint touches it.
SIZE_FACTOR = 4
SIZE_SLACK = 4096


def result_size(value: Any, depth: int = 0) -> int:
    """How many values a result holds (characters for strings), without converting it."""
    if isinstance(value, np.ndarray):
        if value.dtype.kind == "U":
            return int(value.nbytes) // 4
        return int(value.nbytes) if value.dtype.kind in "SV" else int(value.size)
    if isinstance(value, str | bytes):
        return len(value)
    if isinstance(value, tuple | list):
        if depth >= 2 or len(value) > SIZE_SLACK:
            return len(value)
        return sum(result_size(v, depth + 1) for v in value)
    return 1


def size_verdict(expected: Any, got: Any) -> Verdict:
    """Refuse a result hugely larger than the expected one (bounded work on the trusted side)."""
    want, have = result_size(expected), result_size(got)
    if have > SIZE_FACTOR * want + SIZE_SLACK:
        return Verdict(False, f"the result holds {have} values where {want} are expected; "
                              "not compared")
    return Verdict(True)


def trusted_result(part: Part, expected: Any, got: Any) -> Any:
    """The result as the grader judges it: outputs observed inside the sandbox (counts, flags
    the student's process could forge) replaced by their expected values, i.e. ignored."""
    if not part.feedback_outputs or not isinstance(expected, tuple) or \
            not isinstance(got, tuple | list) or len(got) != len(expected):
        return got
    return tuple(expected[j] if j in part.feedback_outputs else g for j, g in enumerate(got))


def judge_case(part: Part, index: int, n_cases: int, args: tuple[Any, ...], expected: Any,
               got: Any, hidden: bool = False) -> Verdict:
    """Compare one case and, on a failure, say which case, what differs and the first hint.

    ``hidden`` (the grader's own count of visible cases decides it): the message keeps shapes,
    kinds, counts and the hint, never a value of the inputs, the expected result or the
    student's result (``withhold``)."""
    verdict = size_verdict(expected, got)
    if not verdict.ok:  # no hint either: hints may walk the result
        return Verdict(False, f"{describe_case(part, index, n_cases, args, hidden)}: "
                              f"{verdict.message}")
    try:
        verdict = part.compare(expected, got)
        if verdict.ok and part.result_check is not None:
            verdict = part.result_check(got, args)
    except Exception as exc:
        verdict = Verdict(False, f"could not compare the result ({type(exc).__name__}: {exc})")
    if verdict.ok:
        return verdict
    output = failed_output(verdict)
    found = _first_hint(part, expected, got, args, output, generic=False)
    if found is None and output is not None:  # another output that fails, with its own hint?
        try:
            verdict, found = _explained_elsewhere(part, expected, got, args, output, verdict)
        except Exception:  # a hint never costs the verdict
            found = None
        output = failed_output(verdict)
    if found is None:
        found = _first_hint(part, expected, got, args, output)
    message = withheld(verdict.message) if hidden else verdict.message
    if part.output_names and message.startswith("output "):
        j = int(message.split(":", 1)[0].split()[1])
        if j < len(part.output_names):
            message = f"output {j} ({part.output_names[j]})" + message[message.index(":"):]
    lines = [f"{describe_case(part, index, n_cases, args, hidden)}: {message}"]
    if found:
        lines.append(f"  hint: {found[1]}")
    return Verdict(False, "\n".join(lines), hint=found[0] if found else "", output=output)


class CheckFailure(Exception):
    """Raised by a Part's ``call`` to fail a case with its own message (no traceback shown)."""


def global_names(code: types.CodeType) -> set[str]:
    """Names a function's code looks up, nested functions and comprehensions included.

    For parts that also check *how* an answer was computed (e.g. through ``get_xp``); the
    grade itself still rests on values compared outside the student's process.
    """
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= global_names(const)
    return names
