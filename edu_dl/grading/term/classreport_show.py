"""How ``edu-dl report`` shows the class (``classreport`` builds it): text for a terminal,
Markdown, JSON, the short form a batch ends with, and score_histogram.png.

Every text that a student could have written (a name) is shown through ``trust.text``: escaped
for the terminal, for a Markdown table cell, or as ASCII JSON.
"""

from __future__ import annotations

import io
import json
from dataclasses import asdict
from pathlib import Path

from edu_dl.grading.notebooks import write_atomic
from edu_dl.grading.term.classreport import HISTOGRAM, ClassReport, ExerciseCount, PartRate, build
from edu_dl.grading.trust.text import for_markdown, for_terminal, visible

SHOWN_CLUSTERS = 30  # in text and Markdown; JSON lists all
HISTOGRAM_EXERCISES = 24
CAUTION = ("identical code is common for short or standard answers and proves nothing by "
           "itself: look at the notebooks before drawing any conclusion")


# --------------------------------------------------------------------------- the histogram


def write_histogram(report: ClassReport, path: Path) -> Path | None:
    """score_histogram.png: per exercise, how many students scored in each tenth of the
    maximum (Agg, no display needed); None when nobody submitted."""
    if not report.scores:
        return None
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    exercises = list(report.scores)[:HISTOGRAM_EXERCISES]
    columns = min(3, len(exercises))
    rows = -(-len(exercises) // columns)
    figure = Figure(figsize=(4.2 * columns, 2.8 * rows), layout="constrained")
    FigureCanvasAgg(figure)
    for index, exercise in enumerate(exercises):
        axes = figure.add_subplot(rows, columns, index + 1)
        scores = [min(100.0, max(0.0, s)) for s in report.scores[exercise]]
        axes.hist(scores, bins=range(0, 101, 10), color="#48a", edgecolor="white")
        axes.set_title(visible(exercise)[:40], fontsize=9, parse_math=False)
        axes.set_xlabel("score (% of the maximum)")
        axes.set_ylabel("students")
        axes.yaxis.set_major_locator(MaxNLocator(integer=True))
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=80)
    write_atomic(path, buffer.getvalue())
    report.histogram = str(path)
    return path


# --------------------------------------------------------------------------- rendering

FORMATS = ("text", "markdown", "json")


def render(report: ClassReport, fmt: str = "text", short: bool = False) -> str:
    """The report as text (``short``: the lines a batch prints at its end), Markdown or JSON."""
    if fmt == "json":
        data = asdict(report)
        for rate, row in zip(report.parts, data["parts"]):
            row["pass_rate"] = round(rate.pass_rate, 4)
        return json.dumps(data, indent=1, ensure_ascii=True)
    if fmt == "markdown":
        return visible("\n".join(_markdown(report)))
    return for_terminal("\n".join(_short(report) if short else _text(report)))


def _percent(rate: PartRate) -> str:
    return f"{100 * rate.pass_rate:.0f}%"


def _exercise_line(c: ExerciseCount) -> str:
    return (f"{c.exercise}: {c.students} students, {c.submitted} submitted, {c.missing} "
            f"missing, {c.late} late, {c.crashed_or_timed_out} crashed or timed out; mean "
            f"{c.mean_score:.2f} of {c.max_score:g}")


def _short(report: ClassReport) -> list[str]:
    lines = ["the class at a glance (counted in students; edu-dl report OUT for all of it):"]
    for c in report.exercises:
        rates = [r for r in report.parts if r.exercise == c.exercise and r.students]
        hardest = min(rates, key=lambda r: r.pass_rate, default=None)
        lines.append(f"  {_exercise_line(c)}" + (
            f"; fewest passed {hardest.part} ({_percent(hardest)})" if hardest else ""))
    if report.shared_cells:
        students = {s for cell in report.shared_cells for s in cell.students}
        lines.append(f"  {len(report.shared_cells)} solution cells submitted identically by "
                     f"two or more students ({len(students)} students) to look at")
    if report.histogram:
        lines.append(f"  scores: {report.histogram}")
    return lines


def _text(report: ClassReport) -> list[str]:
    lines = ["Students (each counted once per exercise)"]
    lines += [f"  {_exercise_line(c)}" for c in report.exercises]
    lines += ["", "Parts (of the students who submitted)",
              f"  {'part':36} {'passed':>12} {'mean points':>14}"]
    lines += [f"  {r.part:36} {f'{r.passed}/{r.students} {_percent(r)}':>12} "
              f"{f'{r.mean_points:.2f} / {r.max_points:g}':>14}" for r in report.parts]
    lines += ["", "Typical mistakes a hint recognised (students per hint)"]
    lines += [f"  {m.part} [{m.hint}] {m.students} students, e.g. {m.example}: {m.message}"
              for m in report.misconceptions] or ["  none"]
    lines += ["", f"Identical solution cells (comments, blank lines and spacing removed; "
                  f"{CAUTION})"]
    for s in report.shared_cells[:SHOWN_CLUSTERS]:
        same = ", the source's own solution" if s.same_as_solution else ""
        lines.append(f"  {s.exercise} cell {s.cell} ({s.tokens} tokens{same}): "
                     f"{', '.join(s.students)}")
    if len(report.shared_cells) > SHOWN_CLUSTERS:
        lines.append(f"  ... {len(report.shared_cells) - SHOWN_CLUSTERS} more (--format json "
                     "lists all)")
    if not report.shared_cells:
        lines.append("  none")
    if report.histogram:
        lines += ["", f"Score histogram: {report.histogram}"]
    lines += [f"note: {n}" for n in report.notes]
    return lines


def _markdown(report: ClassReport) -> list[str]:
    m = for_markdown
    lines = ["# The class at a glance", "", "## Students (each counted once per exercise)", "",
             "| exercise | students | submitted | missing | late | crashed or timed out | "
             "mean score |", "|---|---|---|---|---|---|---|"]
    lines += [f"| {m(c.exercise)} | {c.students} | {c.submitted} | {c.missing} | {c.late} | "
              f"{c.crashed_or_timed_out} | {c.mean_score:.2f} / {c.max_score:g} |"
              for c in report.exercises]
    lines += ["", "## Parts (of the students who submitted)", "",
              "| part | passed | pass rate | mean points |", "|---|---|---|---|"]
    lines += [f"| {m(r.part)} | {r.passed} / {r.students} | {_percent(r)} | "
              f"{r.mean_points:.2f} / {r.max_points:g} |" for r in report.parts]
    lines += ["", "## Typical mistakes a hint recognised", "",
              "| part | hint | students | example | message |", "|---|---|---|---|---|"]
    lines += [f"| {m(x.part)} | {m(x.hint)} | {x.students} | {m(x.example)} | {m(x.message)} |"
              for x in report.misconceptions]
    lines += ["", "## Identical solution cells", "",
              f"Comments, blank lines and spacing removed; {CAUTION}.", "",
              "| exercise | cell | tokens | the solution's | students |",
              "|---|---|---|---|---|"]
    lines += [f"| {m(s.exercise)} | {m(s.cell)} | {s.tokens} | "
              f"{'yes' if s.same_as_solution else ''} | {m(', '.join(s.students))} |"
              for s in report.shared_cells[:SHOWN_CLUSTERS]]
    if report.histogram:
        lines += ["", f"![scores]({HISTOGRAM})"]
    lines += [f"\n*note: {m(n)}*" for n in report.notes]
    return lines


def after_batch(out: Path) -> str:
    """What a batch prints at its end: the short form, with the histogram written (never
    raises: the gradebooks are complete whatever happens here)."""
    try:
        report = build(out)
        write_histogram(report, out / HISTOGRAM)
        return render(report, short=True)
    except Exception as exc:
        return for_terminal(f"the class report could not be made ({type(exc).__name__}: "
                            f"{exc}); edu-dl report {out} tries again")

