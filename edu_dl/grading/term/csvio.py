"""The grader's CSV files: written formula-safe, and read back through one reader that undoes it.

Every cell the grader writes goes through :func:`csv_cell` (control and invisible characters
escaped, a formula guard in front of text a spreadsheet would run: OWASP's CSV injection rule).
Every CSV the grader wrote and reads again (grades.csv for ``lms export`` and ``edu-dl report``,
a filled-in manual.csv) is read through :class:`WrittenCsv`, which takes the guard off again:
a roster id ``-jdoe`` is written ``'-jdoe`` and read back ``-jdoe``. The guard is reversible: a
text that already starts with an apostrophe before a guarded character gets one more, so no
two texts are written alike.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from edu_dl.grading.trust.text import for_terminal

FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
GUARD = "'"
_GUARDED = (*FORMULA_STARTS, GUARD)  # what may follow the guard in a written cell
if TYPE_CHECKING:  # generic in the stubs only
    _DictReader = csv.DictReader[str]
else:
    _DictReader = csv.DictReader


def spreadsheet_safe(value: Any) -> Any:
    """A text cell a spreadsheet will not run as a formula: one that starts with = + - @ or a
    tab/CR gets a leading apostrophe (and so does one that starts with an apostrophe before
    one of those, so that :func:`unguard` gives every text back). Numbers stay numbers."""
    if isinstance(value, str) and (value.startswith(FORMULA_STARTS) or
                                   (value.startswith(GUARD) and value[1:].startswith(_GUARDED))):
        return GUARD + value
    return value


def unguard(value: str) -> str:
    """A cell as :func:`spreadsheet_safe` was given it: its guard apostrophe taken off."""
    return value[1:] if value.startswith(GUARD) and value[1:].startswith(_GUARDED) else value


def csv_cell(value: Any) -> Any:
    """A value as a CSV cell: text with its control characters escaped, formula-safe."""
    return spreadsheet_safe(for_terminal(value)) if isinstance(value, str) else value


def csv_bytes(header: Iterable[Any], lines: Iterable[Iterable[Any]]) -> bytes:
    """A CSV file, every cell (the header's too) through :func:`csv_cell`."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow([csv_cell(v) for v in header])
    writer.writerows([csv_cell(v) for v in line] for line in lines)
    return buffer.getvalue().encode("utf-8")


class WrittenCsv(_DictReader):
    """A CSV the grader wrote, read back as csv.DictReader reads it, every cell unguarded."""

    def __init__(self, text: str) -> None:
        super().__init__(io.StringIO(text))

    def __next__(self) -> dict[str, str]:
        line = super().__next__()
        return {key: unguard(value) if isinstance(value, str) else value
                for key, value in line.items()}
