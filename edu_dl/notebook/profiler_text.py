"""Read a table that ``torch.profiler`` printed (``prof.key_averages().table()``) and someone saved
as text, for a recorded profile whose events are gone (lecture 12 shows one from an H100).

The columns are found from the dashed rule above the header and named by the header, not by
fixed character offsets, so a table with other columns, widths or sort order reads the same way.
A live profile needs none of this: read ``prof.key_averages()`` (``event.key``, ``event.count``,
``event.self_cpu_time_total``, ...) directly.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_RULE = re.compile(r"-+")
_GAP = re.compile(r"\s{2,}")  # column names hold single spaces; columns are two or more apart
_TOTAL = re.compile(r"^(?P<name>[A-Za-z ]+ time total):\s*(?P<value>\S+)\s*$")
_DURATION = re.compile(r"^(?P<number>\d+(?:\.\d+)?)(?P<unit>us|ms|s)$")
_MICROSECONDS = {"us": 1.0, "ms": 1e3, "s": 1e6}


@dataclass(frozen=True)
class ProfilerTable:
    """The rows of a printed profiler table, each a dict from column name to cell text, and the
    totals printed under it ("Self CUDA time total" -> "29.792ms")."""

    columns: list[str]
    rows: list[dict[str, str]]
    totals: dict[str, str]

    def row(self, name: str) -> dict[str, str]:
        """The row whose Name is ``name`` (names longer than the column end in '...')."""
        for row in self.rows:
            if row["Name"] == name:
                return row
        raise KeyError(f"no row named {name!r}; the rows are {[r['Name'] for r in self.rows]}")


def _spans(rule: str) -> list[tuple[int, int]]:
    return [(m.start(), m.end()) for m in _RULE.finditer(rule)]


def read_profiler_table(text: str) -> ProfilerTable:
    """Parse the text of ``key_averages().table()``: rule, header, rule, rows, rule, totals."""
    lines = text.splitlines()
    rules = [i for i, line in enumerate(lines) if line.strip() and set(line.strip()) <= {"-", " "}]
    if len(rules) < 3:
        raise ValueError("not a profiler table: it needs a rule above and below its header and "
                         f"one under its rows, found {len(rules)} rule lines")
    spans = _spans(lines[rules[0]])
    # A name wider than its column ("CUDA time avg") overflows and shifts the names after it, so
    # the header is split at its gaps; the rows, right-aligned in their columns, by the rule.
    columns = _GAP.split(lines[rules[0] + 1].strip())
    if columns[0] != "Name" or len(columns) != len(spans):
        raise ValueError(f"not a profiler table: its header {columns} does not start with 'Name' "
                         f"and name each of its {len(spans)} columns")
    rows = [{column: line[start:end].strip() for column, (start, end) in zip(columns, spans)}
            for line in lines[rules[1] + 1:rules[2]]]
    totals = {}
    for line in lines[rules[2] + 1:]:
        match = _TOTAL.match(line.strip())
        if match:
            totals[match["name"]] = match["value"]
    return ProfilerTable(columns, rows, totals)


def microseconds(cell: str) -> float:
    """A printed duration ("614.642us", "8.952ms", "1.193s") in microseconds."""
    match = _DURATION.match(cell.strip())
    if match is None:
        raise ValueError(f"not a profiler duration: {cell!r}")
    return float(match["number"]) * _MICROSECONDS[match["unit"]]
