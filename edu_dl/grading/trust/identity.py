"""One student, one name: every name that says whose something is (a student folder, an LMS
file's owner, a roster id, a line of manual.csv or --extensions) is compared here, and only here.

A name has two faces besides its bytes. The grader writes it escaped and stripped
(:func:`written`: what grades.csv and manual.csv hold, so "alice\\x01" and the literal text
``alice\\x01`` are one line there); a person reads it with case, Unicode's look-alikes (NFKC) and
invisible characters set aside ("Alice", "alice\\u200b" and "alice" are one person to them).
Two names that become one in either face are one student to somebody, so they are refused,
naming both (:func:`check_distinct`); a name written by hand that matches no student exactly
but one in either face is refused too, never taken as that student
(:meth:`Names.resolve`).
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable

from edu_dl.grading.notebooks import NotebookError
from edu_dl.grading.trust.text import CONTROL, INVISIBLE, for_terminal, visible

HOW = ("once spaces, case, invisible characters, escapes and Unicode look-alikes (NFKC) are "
       "set aside")


class NameClash(NotebookError):
    """Two names that would be one student somewhere; the message names both."""


def written(name: str) -> str:
    """The name as every file the grader writes holds it: escaped, stripped."""
    return for_terminal(name).strip()


def quoted(name: str) -> str:
    """The name for a message: quoted, escaped, so a trailing space or a \\u200b shows."""
    return f"'{for_terminal(name)}'"


def _fold(text: str) -> str:
    """NFKC with case folding (as Unicode's NFKC_Casefold, near enough), spaces collapsed."""
    folded = unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", text).casefold())
    return " ".join(folded.split())


def keys(name: str) -> tuple[str, str]:
    """The name's two faces, folded: what the grader writes, and what a person sees."""
    seen = INVISIBLE.sub("", CONTROL.sub("", visible(name)))
    return "written " + _fold(written(name)), "seen " + _fold(seen)


def clashes(names: Iterable[str]) -> list[tuple[str, str]]:
    """Every pair of different names that one of :func:`keys` makes one, each pair once."""
    first: dict[str, str] = {}
    found: list[tuple[str, str]] = []
    for name in sorted(set(names)):
        for key in keys(name):
            other = first.setdefault(key, name)
            if other != name and (other, name) not in found:
                found.append((other, name))
    return found


def check_distinct(names: Iterable[str], what: str, fix: str) -> None:
    """NameClash naming the first pair of ``names`` (``what``: "student folders", say) that
    would be one student; ``fix``: what to do, for the message."""
    pairs = clashes(names)
    if pairs:
        a, b = pairs[0]
        more = f" (and {len(pairs) - 1} more such pair(s))" if len(pairs) > 1 else ""
        shown = (quoted(a), quoted(b))
        if shown[0] == shown[1]:  # a control character and the text of its escape
            shown = (ascii(a), ascii(b))
        raise NameClash(f"{what} {shown[0]} and {shown[1]} are one name {HOW}{more}; {fix}")


class Names:
    """Students' names, indexed once for the lines written by hand that name them."""

    def __init__(self, names: Iterable[str]) -> None:
        self.by_written: dict[str, list[str]] = {}
        self.by_key: dict[str, set[str]] = {}
        for name in sorted(set(names)):
            self.by_written.setdefault(written(name), []).append(name)
            for key in keys(name):
                self.by_key.setdefault(key, set()).add(name)

    def resolve(self, given: str, where: str) -> str | None:
        """The one name that ``given`` (as the grader wrote it, or as a person typed it) is;
        None when it is none of them in any face. NameClash (``where`` begins the message)
        when it is two of them, or none exactly but one or more in another face: a guess
        would give one student's line to another."""
        exact = self.by_written.get(given, [])
        if len(exact) == 1:
            return exact[0]
        if exact:
            raise NameClash(f"{where}: {quoted(given)} is {' and '.join(map(quoted, exact))} "
                            "as the grader writes them; not applied to either")
        near = sorted(set().union(*(self.by_key.get(key, set()) for key in keys(given))))
        if near:
            raise NameClash(f"{where}: {quoted(given)} is no student exactly, but is "
                            f"{' and '.join(map(quoted, near))} {HOW}; not applied: write "
                            "the name as the gradebook (grades.csv, manual.csv) has it")
        return None
