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
BY_HAND_NOTE = ("a part graded by hand: its rate is the graded students' share of its points "
                "(2 of 2 counts as a pass, 1 of 2 as half of one); answers still waiting for "
                "a person count once graded")


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
        for rate, row in zip(report.parts, data["parts"]):  # None: nobody graded it yet
            row["pass_rate"] = round(rate.pass_rate, 4) if rate.judged else None
        return json.dumps(data, indent=1, ensure_ascii=True)
    if fmt == "markdown":
        return visible("\n".join(_markdown(report)))
    return for_terminal("\n".join(_short(report) if short else _text(report)))


def _percent(rate: PartRate) -> str:
    """The pass rate, or "waiting" while nobody's row has a grade yet (never 0%)."""
    return f"{100 * rate.pass_rate:.0f}%" if rate.judged else "waiting"


def _passed(rate: PartRate) -> str:
    """'6/8 75%' for a part the grader judged alone; a part a person grades shows its rate
    only (a share of the points, which no count of passes says)."""
    if rate.by_hand or rate.waiting:
        return _percent(rate)
    return f"{rate.passed}/{rate.students} {_percent(rate)}"


def _by_hand(rate: PartRate) -> str:
    """'3 of 8 graded by hand so far' (others waiting), '' for a part no person graded."""
    if not (rate.by_hand or rate.waiting):
        return ""
    return (f"{rate.by_hand} of {rate.students} graded by hand"
            + (" so far" if rate.waiting else ""))


def _mean(rate: PartRate) -> str:
    return f"{f'{rate.mean_points:.2f}' if rate.judged else '-'} / {rate.max_points:g}"


def _exercise_line(c: ExerciseCount) -> str:
    return (f"{c.exercise}: {c.students} students, {c.submitted} submitted, {c.missing} "
            f"missing, {c.late} late, {c.crashed_or_timed_out} crashed or timed out; mean "
            f"{c.mean_score:.2f} of {c.max_score:g}{_waiting(c)}")


def _waiting(c: ExerciseCount) -> str:
    return (f" ({c.waiting} students with answers still to grade by hand, 0 points until "
            "then)" if c.waiting else "")


def _hardest(report: ClassReport, exercise: str) -> str:
    """'; fewest passed PART (rate)' among the parts with a grade, rows waiting for a
    person left out, those graded by hand judged by their points as in the report."""
    rates = [r for r in report.parts if r.exercise == exercise and r.judged]
    hardest = min(rates, key=lambda r: r.pass_rate, default=None)
    if hardest is None:
        return ""
    how = " of its points, graded by hand" if hardest.by_hand else ""
    return f"; fewest passed {hardest.part} ({_percent(hardest)}{how})"


def _short(report: ClassReport) -> list[str]:
    lines = ["the class at a glance (counted in students; edu-dl report OUT for all of it):"]
    for c in report.exercises:
        lines.append(f"  {_exercise_line(c)}{_hardest(report, c.exercise)}")
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
    lines += [f"  {r.part:36} {_passed(r):>12} {_mean(r):>14}"
              + (f"   {_by_hand(r)}" if _by_hand(r) else "") for r in report.parts]
    if any(_by_hand(r) for r in report.parts):
        lines.append(f"  {BY_HAND_NOTE}")
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
              f"{c.crashed_or_timed_out} | {c.mean_score:.2f} / {c.max_score:g}{_waiting(c)} |"
              for c in report.exercises]
    lines += ["", "## Parts (of the students who submitted)", "",
              "| part | passed | pass rate | mean points |", "|---|---|---|---|"]
    lines += [f"| {m(r.part)} | {_by_hand(r) or f'{r.passed} / {r.students}'} | "
              f"{_percent(r)} | {_mean(r)} |" for r in report.parts]
    if any(_by_hand(r) for r in report.parts):
        lines += ["", BY_HAND_NOTE]
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

