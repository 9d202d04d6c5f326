"""A notebook's budget, judged from outside the sandbox: what one whole run of it cost.

An exercise may give its notebook a budget (the source's metadata ``edu_dl.budget``: points,
CPU seconds and/or peak MB, ``load.read_budget``): a capstone that must train a model to a target
within what a 2-core laptop gives it, say. The row ``<exercise>.budget`` is judged from what the
sandbox measured itself (``sandbox.Result``: the CPU time of the whole process tree and its peak
memory), never from anything the run reported, and only for a run that ended normally with every
autograded part passed: a notebook that skips its work costs little and earns nothing here.

**A band, not a cliff**, as for the speed tasks: a busy machine only ever adds CPU time (caches
shared, cores contended), so a run measured within the budget is within it; one measured over it
by at most ``BAND`` may be within it on a quiet machine, and a person decides (the row needs
manual grading, the measurement in its message); over by more is over budget.
"""

from __future__ import annotations

from edu_dl.grading.model import BY_HAND, NEEDS, OUTSIDE, Job, Row, budget_row
from edu_dl.grading.stages.receive import Ran

BAND = 0.25  # over the budget by at most this share: a person decides


def budget_rows(job: Job, ran: Ran, judged: list[Row]) -> list[Row]:
    """The exercise's budget row (none without a budget), after ``judged`` (its parts' rows)."""
    budget = job.exercise.budget
    if budget is None:
        return []
    row = Row(job.student, job.exercise.name, budget_row(job.exercise.name), 0.0,
              budget.points, "not measured", "", ran.isolation, OUTSIDE)
    done = ran.done
    failed = [r.part for r in judged if r.judged != BY_HAND and r.status != "passed"]
    if done.killed:
        why = f"the sandbox stopped it ({done.killed})"
    elif failed:
        more = ", ..." if len(failed) > 3 else ""
        why = f"not every part passed ({', '.join(failed[:3])}{more})"
    else:
        why = ""
    if why:
        row.message = (f"not measured: {why}; the budget is judged on a whole run whose parts "
                       "all pass")
        return [row]
    shown, over, close = [], [], []
    for name, used, limit, unit in (("CPU time", done.cpu_s, budget.cpu_s, "s"),
                                    ("peak memory", done.peak_memory_mb, budget.memory_mb, "MB")):
        if limit is None:
            continue
        said = f"{name} {used:,.1f} {unit} of its {limit:,.4g} {unit}"
        shown.append(said)
        if used > limit * (1 + BAND):
            over.append(said)
        elif used > limit:
            close.append(said)
    measured = "; ".join(shown) + " (the whole notebook's run, measured outside the sandbox)"
    if over:
        row.status, row.message = "over budget", measured
    elif close:
        row.status, row.judged, row.answer = NEEDS, BY_HAND, measured
        busy = " (a busy machine adds CPU time)" if any(c.startswith("CPU") for c in close) else ""
        row.message = (f"{measured}: within {BAND:.0%} over the budget, too close for the "
                       f"measurement to decide{busy}: a person grades it")
    else:
        row.status, row.points, row.message = "passed", budget.points, measured
    return [row]
