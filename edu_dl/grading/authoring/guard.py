"""The one guard around a student's call: how long it runs, and what it does to its inputs.

``check()`` (in the student's kernel), ``edu-dl validate`` and ``edu-dl grade`` (in the sandbox,
judged outside) watch a call with the same code here and reach the same verdict with it:

- :func:`time_limit`: a function that does not return is stopped after a bound (SIGALRM in the
  main thread; where there is none, as on Windows, a timer thread interrupts the main thread;
  off the main thread no bound is possible, and the call runs as it would without check()).
- :func:`watching` and :func:`findings`: which of a case's arguments the call wrote into,
  found by comparing them with an untouched copy of the case (arrays, lists, tuples and dicts of
  them; bounded in size), and the copies a part's ``call=`` handed the function in their place
  (:func:`watch`); a result that is an argument itself where a part forbids it (:func:`alias`).
- :func:`judged`: a case's verdict with those findings, one message for every path, naming each
  argument by its parameter name (``Part.arg_names``).

A finding crosses the sandbox's wall as three integers (:data:`WROTE` or :data:`ALIASED`, the
argument's index, the entries changed): the grader names and words it from its own Part. Like
every output of the sandbox it is the student's process's report: a forged one can hide a write
the function need not have made, never make a wrong value pass (the values are judged outside).
"""

from __future__ import annotations

import _thread
import contextlib
import contextvars
import signal
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

if TYPE_CHECKING:
    from edu_dl.grading.authoring.spec import Part, Verdict

MAX_COMPARED_BYTES = 1 << 26  # larger arguments are not compared (64 MB: far above any case)
MAX_DEPTH = 4  # nested containers deeper than this are not looked into


class CheckTimeout(BaseException):
    """The checked function ran past its time bound. A BaseException, as KeyboardInterrupt is:
    a student's ``except Exception:`` inside the loop must not swallow it."""


def _alarm(signum: int, frame: Any) -> None:
    raise CheckTimeout()


@contextlib.contextmanager
def time_limit(seconds: float | None) -> Iterator[bool]:
    """Raise CheckTimeout in the block after ``seconds``; yields whether a bound is in force."""
    if seconds is None or seconds <= 0 or threading.current_thread() is not threading.main_thread():
        yield False
        return
    if hasattr(signal, "setitimer"):
        previous = signal.signal(signal.SIGALRM, _alarm)
        signal.setitimer(signal.ITIMER_REAL, seconds)
        try:
            yield True
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
        return
    fired = threading.Event()

    def interrupt() -> None:
        fired.set()
        _thread.interrupt_main()

    timer = threading.Timer(seconds, interrupt)
    timer.daemon = True
    timer.start()
    try:
        yield True
    except KeyboardInterrupt:
        if fired.is_set():
            raise CheckTimeout() from None
        raise
    finally:
        timer.cancel()


def _difference(old: Any, new: Any, depth: int) -> str | None:
    """None if ``new`` still equals ``old`` (or cannot be compared cheaply), else what changed
    ('' when there is nothing more precise to say)."""
    if depth > MAX_DEPTH:
        return None
    try:
        if isinstance(old, np.ndarray):
            if not isinstance(new, np.ndarray) or old.shape != new.shape:
                return "its shape"
            if old.nbytes > MAX_COMPARED_BYTES or old.dtype.kind == "O":
                return None
            if old.dtype != new.dtype:
                return "its dtype"
            differ = ~((old == new) | ((old != old) & (new != new)))  # nan equals nan here
            count = int(np.count_nonzero(differ))
            return f"{count} of {old.size} entries" if count else None
        if isinstance(old, list | tuple):
            if len(old) != len(new):
                return f"{len(new)} items where it held {len(old)}"
            if len(old) > 100_000:
                return None
            found = [k for k, (o, n) in enumerate(zip(old, new))
                     if _difference(o, n, depth + 1) is not None]
            return f"item {found[0]}" if found else None
        if isinstance(old, dict):
            if set(old) != set(new):
                return "its keys"
            found = [k for k in old if _difference(old[k], new[k], depth + 1) is not None]
            return f"item {found[0]!r}" if found else None
        if isinstance(old, bool | int | float | str | bytes | np.generic) or old is None:
            same = old == new or (old != old and new != new)
            return None if bool(same) else ""
    except Exception:  # an object that does not compare: not ours to judge
        return None
    return None


# --------------------------------------------------------------------------- one guard

# The record of what the guard saw (Finding, encode, decode) is the wire format's: protocol.py
# (which reads it back from the sandbox and must not import this module: spec imports protocol).
from edu_dl.grading.protocol import ALIASED, WROTE, Finding  # noqa: E402

T = TypeVar("T")


@dataclass
class Watched:
    """What a part's call= reported while it ran: the copies it handed the function in place of
    case arguments (argument index, the copy, the copy as it was), and the arguments a result
    was found to alias."""

    copies: list[tuple[int, Any, Any]] = field(default_factory=list)
    aliased: list[int] = field(default_factory=list)


_WATCHING: contextvars.ContextVar[Watched | None] = \
    contextvars.ContextVar("edu_dl_guard_watching", default=None)


@contextlib.contextmanager
def watching(watched: Watched) -> Iterator[Watched]:
    """Collect into ``watched`` what :func:`watch` and :func:`alias` report in the block (the
    call of one case). The case itself is compared afterwards by :func:`findings`, from a copy
    the caller keeps out of the call's reach; ``watched`` stays filled when the call raised."""
    token = _WATCHING.set(watched)
    try:
        yield watched
    finally:
        _WATCHING.reset(token)


def watch(arg: int, value: T) -> T:
    """``value``, handed to the student's function in place of case argument ``arg`` (a float64
    copy, a seed the harness made): a write into it counts as a write into that argument.
    Outside :func:`watching` (a part's call used on its own) it only returns ``value``."""
    watched = _WATCHING.get()
    if watched is not None:
        watched.copies.append((arg, value, _copy(value)))
    return value


def alias(arg: int, result: Any, value: Any) -> None:
    """For a part whose result must be new memory (``tape_backward``'s gradients): note when
    ``result`` shares memory with ``value``, which stands for case argument ``arg``."""
    watched = _WATCHING.get()
    if watched is None or arg in watched.aliased:
        return
    if isinstance(result, np.ndarray) and isinstance(value, np.ndarray) and \
            np.shares_memory(result, value):
        watched.aliased.append(arg)


def findings(case: Sequence[Any], given: Sequence[Any], watched: Watched | None = None
             ) -> list[Finding]:
    """The arguments ``given`` (the case the call got) no longer equals ``case`` (an untouched
    copy) in, and the watched copies that changed, in argument order; then the aliased ones."""
    wrote: dict[int, int] = {}
    for j, (old, new) in enumerate(zip(case, given)):
        changed = _changed(old, new)
        if changed is not None:
            wrote[j] = changed
    for j, value, before in watched.copies if watched is not None else ():
        changed = _changed(_numpy(before), _numpy(value))
        if changed is not None and j not in wrote:
            wrote[j] = changed
    found = [Finding(WROTE, j, wrote[j]) for j in sorted(wrote)]
    aliased = sorted(set(watched.aliased)) if watched is not None else []
    return found + [Finding(ALIASED, j) for j in aliased]


def _is_tensor(value: Any) -> bool:
    return type(value).__module__.split(".")[0] == "torch" and hasattr(value, "detach")


def _numpy(value: Any) -> Any:
    """A torch tensor a part's call= handed over, as a NumPy array to compare; else itself."""
    return value.detach().cpu().numpy() if _is_tensor(value) else value


def _copy(value: Any) -> Any:
    """A copy to compare with later: arrays (a torch tensor too), and lists, tuples and dicts
    of them."""
    if _is_tensor(value):
        return value.detach().clone()
    if isinstance(value, np.ndarray):
        return value.copy() if value.nbytes <= MAX_COMPARED_BYTES else value
    if isinstance(value, list | tuple):
        return type(value)(_copy(v) for v in value) if len(value) <= 100_000 else value
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    return value


def _changed(old: Any, new: Any) -> int | None:
    """None when ``new`` still equals ``old``; else how many entries of an array changed (-1
    when that is not a count: another shape or dtype, a list's items)."""
    how = _difference(old, new, 0)
    if how is None:
        return None
    if isinstance(old, np.ndarray) and how.endswith(f" of {old.size} entries"):
        return int(how.split(" ", 1)[0])
    return -1


def argument_name(part: Part, arg: int) -> str:
    """```dout```: a case argument by the part's name for it (every course part names all)."""
    return f"`{part.arg_names[arg]}`" if arg < len(part.arg_names) else f"argument {arg + 1}"


def said(part: Part, args: tuple[Any, ...], found: Sequence[Finding]) -> tuple[str, str]:
    """(what the call did, the hint) for a case's findings, naming each argument."""
    lines, hints = [], []
    wrote = [f for f in found if f.kind == WROTE]
    if wrote:
        named = []
        for f in wrote:
            arg = args[f.arg] if f.arg < len(args) else None
            count = (f" ({f.changed} of {arg.size} entries)"
                     if isinstance(arg, np.ndarray) and 0 < f.changed <= arg.size else "")
            named.append(f"{argument_name(part, f.arg)}{count}")
        plural = "arguments" if len(named) > 1 else "argument"
        lines.append(f"your function wrote into its {plural} {', '.join(named)}")
        hints.append("leave the caller's inputs as they are and compute into a new array "
                     "(y = x * m, not x *= m or x[...] = ...)")
    aliased = [argument_name(part, f.arg) for f in found if f.kind == ALIASED]
    if aliased:
        names = ", ".join(aliased)
        lines.append(f"your result holds the caller's {names} itself, not a new array")
        hints.append(f"a gradient stored by reference is the caller's {names}: the next += "
                     "into it changes theirs too; store a new array (g.copy(), or "
                     "grads[i] = grads[i] + g)")
    return "; and ".join(lines), "; ".join(hints)


def judged(part: Part, index: int, n_cases: int, args: tuple[Any, ...],
           found: Sequence[Finding], verdict: Verdict, hidden: bool = False) -> Verdict:
    """A case's verdict with what the guard found: ``verdict`` itself when it found nothing
    (or the part's contract is in place), else a failure saying what the call did to which
    argument, with its hint, and what was wrong with the values too."""
    from edu_dl.grading.authoring.spec import ALIASED_HINT, WROTE_HINT, Verdict, describe_case

    if not found or part.in_place:
        return verdict
    what, hint = said(part, args, found)
    message = f"{describe_case(part, index, n_cases, args, hidden)}: {what}\n  hint: {hint}"
    if not verdict.ok:
        message += "\n  and: " + verdict.message.partition(": ")[2]
    return Verdict(False, message, hint=WROTE_HINT if found[0].kind == WROTE else ALIASED_HINT)
