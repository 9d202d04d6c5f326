"""A cell's error as the runner recorded it, and the earlier cell that caused a ``NameError``.

The text comes from the sandbox (``run.json``: ``"ename: evalue"``, already capped by
``trust.result``), and the student chose it: an exception class can be named anything and its
message can be anything. So it is read strictly here, or not at all: the exception's name must
be an identifier, its message is cut to its first line and :data:`VALUE_CAP` characters, the
line of a ``SyntaxError`` is a bounded number. Cell sources are student text too: they are only
searched with fixed, linear patterns, and only up to :data:`MAX_SOURCE` characters.

Which line of a test cell raised (:func:`raised_in_hidden`) is read from the error output's
traceback, as strictly: it decides only whether the student reads "a hidden test failed".
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from edu_dl.grading.nbgrader import hidden_lines

VALUE_CAP = 200  # characters of an exception's message named as a cause
MAX_SOURCE = 100_000  # characters of a cell searched for a definition
IDENTIFIER = r"[A-Za-z_][A-Za-z0-9_]{0,99}"
ERROR = re.compile(rf"(?P<name>{IDENTIFIER}(?:\.{IDENTIFIER}){{0,5}}): ?(?P<value>[^\n]*)")
# IPython names the cell's code by a temporary file: "invalid syntax (497993260.py, line 3)"
WHERE = re.compile(r" \((?:[^(),\n]{1,200}, )?line (?P<line>[0-9]{1,7})\)$")
UNDEFINED = re.compile(rf"name '(?P<name>{IDENTIFIER})' is not defined")
# Errors of a cell that stop all of it: nothing it defines exists afterwards.
SYNTAX_ERRORS = frozenset({"SyntaxError", "IndentationError", "TabError"})


@dataclass(frozen=True)
class CellError:
    """One recorded cell error: the exception's class name, its message's first line and, for a
    syntax error, the line of the cell it is on."""

    name: str
    value: str
    line: int | None = None

    def __str__(self) -> str:
        where = f" (line {self.line})" if self.line is not None else ""
        return f"{self.name}: {self.value}{where}" if self.value else f"{self.name}{where}"

    @property
    def undefined(self) -> str | None:
        """The name a NameError says is not defined, or None."""
        match = UNDEFINED.fullmatch(self.value) if self.name == "NameError" else None
        return match.group("name") if match else None


def parse_error(text: str) -> CellError | None:
    """The runner's ``"ename: evalue"`` as a CellError, or None when it is not of that form."""
    match = ERROR.match(text[: 2 * VALUE_CAP + 800])
    if match is None:
        return None
    value, line = match.group("value").strip(), None
    where = WHERE.search(value) if match.group("name") in SYNTAX_ERRORS else None
    if where is not None:
        value, line = value[: where.start()], int(where.group("line"))
    if len(value) > VALUE_CAP:
        value = value[:VALUE_CAP] + " [...]"
    return CellError(match.group("name"), value, line)


def defines(source: str, name: str) -> bool:
    """Whether a cell's text would bind ``name`` at its top level (a def, a class, an
    assignment or an import of it): read as text, because a cell with a syntax error has no
    tree. A cell over MAX_SOURCE characters is not searched."""
    if len(source) > MAX_SOURCE or not re.fullmatch(IDENTIFIER, name):
        return False
    word = re.escape(name)
    binding = re.compile(rf"^(?:(?:async[ \t]+)?def|class)[ \t]+{word}\b"
                         rf"|^{word}[ \t]*(?::|=(?!=))"
                         rf"|^(?:from[ \t]+\S+[ \t]+)?import[ \t][^\n]*\b{word}\b", re.M)
    return binding.search(source) is not None


def cause_of(test_index: int, test_error: CellError | None,
             errors: Iterable[tuple[int, CellError, str]]) -> tuple[int, CellError] | None:
    """Which earlier cell's error left a test cell without the name it raised NameError on:
    the last cell before ``test_index`` that failed and would have defined it.

    ``errors``: (cell index, its error, its source) of every cell that raised, in order.
    """
    name = test_error.undefined if test_error is not None else None
    if name is None:
        return None
    found = None
    for index, error, source in errors:
        if index < test_index and defines(source, name):
            found = (index, error)
    return found


# --------------------------------------------------------------------------- where a cell failed

ANSI = re.compile(r"\x1b\[[0-9;?]{0,40}[ -/]{0,4}[@-~]")
# The frame of a notebook cell in IPython's traceback, ANSI colours taken out: IPython 8.6 and
# later ("Cell In[3], line 4"), 8.0 to 8.5 ("Input In [3], in <cell line: 4>()"), 7
# ("<ipython-input-3-5f1a...> in <module>", the line by the arrow "----> 4").
CELL_FRAME = re.compile(r"\s{0,20}(?:Cell In ?\[(?P<a>[0-9 ]{0,9})\], line (?P<la>[0-9]{1,7})"
                        r"|Input In ?\[(?P<b>[0-9 ]{0,9})\], in <cell line: (?P<lb>[0-9]{1,7})>"
                        r"|<ipython-input-(?P<c>[0-9]{1,9})-[0-9a-f]{1,40}> in )")
ARROW = re.compile(r"^-{2,}> ?(?P<line>[0-9]{1,7})", re.M)
MAX_FRAMES = 100  # traceback entries read
FRAME_TEXT = 10_000  # characters of one entry read


def failing_line(traceback: object, count: int | None) -> int | None:
    """The line of the cell (numbered from 1) whose statement raised, read from the traceback
    of the cell's error output: its first frame in the cell that ran as ``In[count]`` (the
    first cell frame when ``count`` is None). None when no such frame is found.

    The traceback was written in the sandbox: a forged one can only make the grader say a
    visible test failed where a hidden one did, or the other way round."""
    if not isinstance(traceback, list):
        return None
    for entry in traceback[:MAX_FRAMES]:
        text = ANSI.sub("", entry[:FRAME_TEXT]) if isinstance(entry, str) else ""
        frame = CELL_FRAME.match(text)
        if frame is None:
            continue
        ran = (frame["a"] if frame["a"] is not None else frame["b"] if frame["b"] is not None
               else frame["c"] or "").strip()
        if count is not None and ran and ran != str(count):
            continue  # another cell's frame (a function the test called)
        line = frame["la"] or frame["lb"]
        if line is None:
            arrow = ARROW.search(text)
            line = arrow["line"] if arrow else None
        return int(line) if line is not None else None
    return None


def raised_in_hidden(source: str, traceback: object, count: int | None) -> bool:
    """Whether a test cell's error was raised by a statement of one of its hidden-test regions:
    the line the traceback names (:func:`failing_line`) against the regions of ``source``,
    the cell's source as the grader restored it (never the one the sandbox returned)."""
    line = failing_line(traceback, count)
    return line is not None and line in hidden_lines(source)
