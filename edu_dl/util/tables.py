"""Tables as text: aligned columns for a terminal, and Markdown for reports.

``edu-dl doctor`` and every benchmark print through these two, so their tables look alike.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence


def table(headers: Sequence[str], rows: Sequence[Sequence[str]], width: int | None = None,
          wrap: int | None = None, right_from: int | None = None) -> str:
    """A plain aligned text table with a rule under the header.

    Columns from index ``right_from`` on are right-aligned (numbers); the others left-aligned.
    With ``width`` and ``wrap`` (a column's index), that column's cells are wrapped onto more
    lines where the table would be wider than ``width``.
    """
    widths = [max(len(str(r[i])) for r in [headers, *rows]) for i in range(len(headers))]
    cells = [[[str(c)] for c in r] for r in rows]
    if width is not None and wrap is not None:
        others = sum(w for i, w in enumerate(widths) if i != wrap) + 2 * (len(widths) - 1)
        fit = max(len(str(headers[wrap])), width - others)
        if widths[wrap] > fit:
            widths[wrap] = fit
            for row in cells:
                row[wrap] = textwrap.wrap(row[wrap][0], fit, break_on_hyphens=False) or [""]

    def line(row: Sequence[str]) -> str:
        return "  ".join(cell.rjust(w) if right_from is not None and i >= right_from
                         else cell.ljust(w)
                         for i, (cell, w) in enumerate(zip(row, widths))).rstrip()

    lines = [line([str(h) for h in headers]), "  ".join("-" * w for w in widths)]
    for row in cells:
        for k in range(max(len(c) for c in row)):
            lines.append(line([c[k] if k < len(c) else "" for c in row]))
    return "\n".join(lines)


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[str]],
                   right: Sequence[bool] = ()) -> list[str]:
    """A Markdown table's lines; ``right[i]`` right-aligns column i (an empty cell stays '| |')."""

    def line(cells: Sequence[str]) -> str:
        return "|" + "|".join(f" {c} " if c else " " for c in cells) + "|"

    rule = "|" + "|".join("---:" if i < len(right) and right[i] else "---"
                          for i in range(len(headers))) + "|"
    return [line(headers), rule, *(line(r) for r in rows)]
