"""What ``edu-dl lms collect`` says: a summary and each problem, and the CSV report.

Member names are the students': the terminal text goes through ``trust.text.say`` (control
characters escaped) and the CSV through ``csvio.csv_cell`` (formula-safe).
"""

from __future__ import annotations

import io
from collections import Counter
from pathlib import Path

from edu_dl.grading.term.csvio import csv_bytes
from edu_dl.grading.term.lms.collect import Collected
from edu_dl.grading.term.lms.roster import IDS_FILE

COLUMNS = ("download", "member", "user", "student", "exercise", "status", "message")


def report_csv(found: Collected) -> bytes:
    """The CSV report: one line per download member (``COLUMNS``), collected or not."""
    return csv_bytes(COLUMNS, ([getattr(line, c) for c in COLUMNS] for line in found.lines))


def report_text(found: Collected, out: Path) -> str:
    """The terminal summary: each problem, then how many notebooks of how many students went into
    ``out``/submitted, and the command to run next."""
    buffer = io.StringIO()
    for line in found.problems:
        where = "/".join(p for p in (line.download, line.member) if p)
        buffer.write(f"{line.status}: {where}: {line.message}\n")
    written = found.written
    untimed = sum(1 for line in written if line.message.startswith("no submission time"))
    counts = Counter(line.status for line in found.problems)
    buffer.write(
        f"collected {len(written)} notebook(s) of {len({line.student for line in written})} "
        f"student(s) into {out / 'submitted'}"
        + (f"; {untimed} without a submission time (no timestamp.txt)" if untimed else "")
        + ("; not collected: " + ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
           if counts else "")
        + f"\nnext: edu-dl grade {out} --source SOURCE --out GRADES")
    if written and not found.checked:
        names = sorted({line.exercise for line in written})
        buffer.write(f"\nthe exercises were named by the uploaded files ({', '.join(names)}), "
                     "unchecked: with --source, a name that matches no source notebook is "
                     "not collected")
    if found.ids:
        buffer.write(f"\nrecorded the Canvas ids of {found.ids} student(s) in "
                     f"{out / IDS_FILE}: edu-dl lms export canvas GRADES --collected {out} "
                     "uses them")
    return buffer.getvalue()
