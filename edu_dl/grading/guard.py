"""What check() watches around a student's call: how long it runs, and what it does to its inputs.

- :func:`time_limit`: a function that does not return is stopped after a bound (SIGALRM in the
  main thread; where there is none, as on Windows, a timer thread interrupts the main thread;
  off the main thread no bound is possible, and the call runs as it would without check()).
- :func:`changed_arguments`: the arguments a call wrote into, found by comparing them with an
  untouched copy of the case (arrays, lists, tuples and dicts of them; bounded in size).
"""

from __future__ import annotations

import _thread
import contextlib
import signal
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np

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


def changed_arguments(before: tuple[Any, ...], after: tuple[Any, ...],
                      names: tuple[str, ...]) -> list[tuple[str, str]]:
    """(name, what changed: '4 of 6 entries', or '') of each argument ``after`` differs from
    ``before`` in."""
    changed = []
    for j, (old, new) in enumerate(zip(before, after)):
        how = _difference(old, new, 0)
        if how is not None:
            changed.append((names[j] if j < len(names) else f"arg{j}", how))
    return changed


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
