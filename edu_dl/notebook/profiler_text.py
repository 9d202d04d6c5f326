"""Read a table that ``torch.profiler`` printed (``prof.key_averages().table()``) and someone saved
as text, for a recorded profile whose events are gone (lecture 17 shows one from an H100).

The columns are found from the dashed rule above the header and named by the header, not by
fixed character offsets, so a table with other columns, widths or sort order reads the same way.
A live profile needs none of this: read ``prof.key_averages()`` (``event.key``, ``event.count``,
``event.self_cpu_time_total``, ...) directly.

A row adds up every event of one name, and an event's total includes the events nested inside
it. So where one call of an operation is recorded as two events of the same name, one inside the
other, the row's total counts that call twice: under ``torch.autocast``, ``aten::conv2d`` casts
its inputs and calls ``aten::conv2d`` again, and the printed row shows twice the calls of every
other layer's row. ``layer_time`` counts each call once; self times never need it.
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


def once_per_call(table: ProfilerTable, name: str, calls: int, column: str = "CUDA total"
                  ) -> float:
    """Microseconds of ``column`` in row ``name``, each of its ``calls`` calls counted once.

    A row with ``k * calls`` events (``# of Calls``) recorded each call as ``k`` nested events of
    one name; every event's total holds the ones inside it, so the row's total counts a call up to
    ``k`` times. Divided by ``k`` it lies between the innermost events' sum (the operation itself)
    and the outermost events' (what each call took, with what the outer event did besides calling
    the inner one: autocast's casts to the 16-bit type). A row with ``calls`` events is returned as
    it is. Self-time columns count nothing twice: do not use this for them.
    """
    events = int(table.row(name)["# of Calls"])
    if calls <= 0 or events % calls:
        raise ValueError(f"{name!r} has {events} events, not a whole multiple of {calls} calls")
    return microseconds(table.row(name)[column]) / (events // calls)


@dataclass(frozen=True)
class LayerTime:
    """One kind of layer's time in a profile, forward and backward, each call counted once."""

    forward: str  # the forward row ("aten::conv2d")
    backward: str  # its autograd node's row ("ConvolutionBackward0")
    calls: int  # the backward row's events: autograd makes one node per forward call
    forward_events: int  # the forward row's events: calls times the events one call makes
    forward_us: float
    backward_us: float

    @property
    def total_us(self) -> float:
        return self.forward_us + self.backward_us

    @property
    def events_per_call(self) -> int:
        return self.forward_events // self.calls


def layer_time(table: ProfilerTable, forward: str, backward: str, column: str = "CUDA total"
               ) -> LayerTime:
    """The ``column`` time of the forward row ``forward`` and the backward row ``backward`` (an
    autograd node, ``...Backward0``), each forward call counted once (``once_per_call``): the
    backward row gives the number of calls, since autograd records one node per forward call."""
    calls = int(table.row(backward)["# of Calls"])
    return LayerTime(forward, backward, calls, int(table.row(forward)["# of Calls"]),
                     once_per_call(table, forward, calls, column),
                     once_per_call(table, backward, calls, column))
