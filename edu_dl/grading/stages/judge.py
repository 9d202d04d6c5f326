"""Judge: the student's raw results against each part's oracle, here, outside the sandbox.

A part passes only on positive evidence: its results, compared with the oracle on the inputs drawn
in ``prepare``. Nothing the student's process prints, patches or exits with can make a wrong
answer pass. Graded cells that no part judges (nbgrader's assert cells, answers, tasks) are scored
as nbgrader scores them (``nbgrader.determine_grade``) or left to a person.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import nbformat

from edu_dl.grading import sandbox
from edu_dl.grading.authoring import guard
from edu_dl.grading.authoring.source import judge_source
from edu_dl.grading.authoring.spec import (
    Part,
    Verdict,
    given,
    judge_case,
    oracle,
    trusted_result,
    uses_named,
)
from edu_dl.grading.authoring.withhold import withheld_error
from edu_dl.grading.model import (
    AFTER_TIMEOUT,
    NEEDS,
    NOT_ANSWERED,
    OUTSIDE,
    Exercise,
    Job,
    Row,
    cap_text,
)
from edu_dl.grading.nbgrader import (
    PartialCreditError,
    determine_grade,
    grade_id,
    hidden_failure,
    is_solution,
    nbgrader,
    unanswered,
)
from edu_dl.grading.protocol import ErrorText, unguarded
from edu_dl.grading.settings import Settings
from edu_dl.grading.stages.budget import budget_rows
from edu_dl.grading.stages.prepare import Prepared
from edu_dl.grading.stages.receive import Ran
from edu_dl.grading.stages.restore import copy_cell
from edu_dl.grading.trust.errors import CellError, cause_of, parse_error, raised_in_hidden
from edu_dl.grading.trust.notebook import execution_count
from edu_dl.grading.trust.result import RunRecord
from edu_dl.grading.trust.source import SourceReader

STATUS_OF_KILL = {"timeout": "timeout", "memory": "memory", "processes": "processes"}


def judge_run(job: Job, prepared: Prepared, ran: Ran, settings: Settings) -> list[Row]:
    """One row per part: the student's raw results judged here, or why there are none."""
    returned = ran.returned
    # Parses each cell once, for this submission only; a name imported from the student's own
    # package is read from the files the grader read beside the notebook.
    sources = SourceReader(prepared.notebook, (job.exercise.package, job.package))
    skipped = after_timeout(returned.record, job.exercise, settings)
    rows = []
    for part_id, test_id in job.exercise.parts:
        part = prepared.parts[part_id]
        status, message, got = _outcome(part_id, test_id, returned.record, returned.outputs,
                                        ran.done, returned.problem, settings, skipped)
        if status == "error":
            message = with_cause(message, test_id, returned.record, prepared, job.exercise)
        points, failed, hint = 0.0, "", ""
        if got is not None:
            source = sources.find(part_id) if part.source_check else None
            # hidden or visible: from what was drawn here (0 unknown: all hidden), never from
            # the "hidden" flag the sandbox wrote
            judged = judge_part(part, prepared.cases[part_id], got, source,
                                sources.problems.get(part_id, ""),
                                visible=prepared.visible.get(part_id, 0))
            status, message, points, failed = (judged.status, judged.message, judged.points,
                                               judged.failed)
            hint = judged.hints
        note = "; ".join(n for n in prepared.notes if f"'{test_id}'" in n)
        if note and status != "passed":
            message = f"{message} ({note})"
        rows.append(Row(job.student, job.exercise.name, part_id, points, float(part.points),
                        status, message, ran.isolation, OUTSIDE, failed_cases=failed,
                        hint=hint))
    blame_dependencies(rows, prepared.parts)
    rows += judge_cells(job, prepared, ran, settings)
    return rows + budget_rows(job, ran, rows)  # the whole run's cost, judged last


def blame_dependencies(rows: list[Row], parts: Mapping[str, Part]) -> None:
    """A failing part whose function uses another graded function (``Part.uses``) that failed
    too says so first: "your `im2col` fails its own check (ex11.im2col); fix it first"."""
    status = {row.part: row.status for row in rows}
    for row in rows:
        part = parts.get(row.part)
        if part is None or row.status == "passed":
            continue
        failing = [(dep, name) for dep, name in map(uses_named, part.uses)
                   if status.get(dep, "passed") != "passed"]
        if failing:
            names = ", ".join(f"`{name}`" for _, name in failing)
            verb = "fails its" if len(failing) == 1 else "fail their"
            row.message = (f"your {names} {verb} own check "
                           f"({', '.join(dep for dep, _ in failing)}); fix it "
                           f"first\n{row.message}")


def judge_cells(job: Job, prepared: Prepared, ran: Ran, settings: Settings) -> list[Row]:
    """Rows of the graded cells no Part judges: nbgrader test cells scored from the executed
    notebook as nbgrader's determine_grade scores them, and what a person must grade."""
    returned = ran.returned
    ran_cells = {grade_id(c): c for c in ran.executed.cells} if ran.executed is not None else {}
    restored = {grade_id(c): c for c in prepared.notebook.cells if grade_id(c)}
    source = {grade_id(c): c for c in job.exercise.notebook.cells if grade_id(c)}
    rows = []
    for graded in job.exercise.cells:
        gid, max_points = graded.grade_id, graded.points
        row = Row(job.student, job.exercise.name, gid, 0.0, max_points, "", "", ran.isolation,
                  graded.judged)
        rows.append(row)
        if graded.kind == "task":
            row.status, row.message = NEEDS, "a task: graded by hand"
            row.answer = cap_text(f"(the task) {source[gid].get('source', '')}", 8000)
            continue
        if graded.kind == "answer":
            cell = _as_source(restored.get(gid), source[gid])
            answer = str(cell.get("source", "")) if cell is not None else ""
            row.answer = cap_text(answer, 8000)
            score = determine_grade(cell, max_points, job.exercise.checksums.get(gid)) \
                if cell is not None else 0.0
            if score is None and not unanswered(answer, job.exercise.released.get(gid)):
                row.status, row.message = NEEDS, "an answer: graded by hand"
            else:  # 0 points, and no person is asked to grade a blank
                row.status, row.message = NOT_ANSWERED, "the answer cell was left as released"
            continue
        status, message, _ = _outcome(f"test cell {gid!r}", gid, returned.record, {},
                                      ran.done, returned.problem, settings,
                                      after_timeout(returned.record, job.exercise, settings))
        if status not in ("no result", "error"):  # never ran, timed out, killed, crashed
            row.status, row.message = status, message
            continue
        cell = ran_cells.get(gid)
        if cell is None or cell.get("cell_type") != "code":
            why = f" ({ran.unused})" if ran.unused else ""
            row.status, row.message = "no result", f"test cell {gid!r} is not in the " \
                f"executed notebook{why}"
            continue
        cell = _as_source(cell, source[gid])
        try:
            score = determine_grade(cell, max_points, None)
        except PartialCreditError as exc:
            row.status, row.message = "error", f"test cell {gid!r}: {exc}"
            continue
        row.points = float(score or 0.0)
        row.status = ("passed" if row.points == max_points else
                      "partial" if row.points > 0 else "failed")
        row.message = _test_cell_message(gid, cell, row.points, max_points)
        if row.points == 0:
            row.message = with_cause(row.message, gid, returned.record, prepared, job.exercise)
        if row.points > 0 and _wrote_stderr(returned.record, gid):
            # the runner's output cap dropped the stderr output nbgrader would have seen
            row.points, row.status = 0.0, "failed"
            row.message = (f"test cell {gid!r} wrote to stderr (nbgrader scores that 0; the "
                           "output itself was cut by the output cap)")
    for row in rows:
        note = "; ".join(n for n in prepared.notes if f"'{row.part}'" in n)
        if note and row.status != "passed":
            row.message = cap_text(f"{row.message} ({note})")
    return rows


def _wrote_stderr(record: RunRecord, gid: str) -> bool:
    """Whether the runner saw the test cell write to stderr (the record is the sandbox's: as
    with every assert cell, the student's process could forge it)."""
    return any(c.grade_id == gid and c.stderr for c in record.cells)


def _as_source(cell: Any, original: Any) -> Any:
    """The cell with the source's nbgrader metadata (points, flags, grade_id): what is judged
    never rests on metadata the student could edit."""
    if cell is None:
        return None
    cell = copy_cell(cell) if cell.get("cell_type") != "code" else _with_outputs(cell)
    cell.metadata["nbgrader"] = json.loads(json.dumps(nbgrader(original)))
    return cell


def _with_outputs(cell: Any) -> Any:
    return nbformat.from_dict(json.loads(json.dumps(cell)))


def _test_cell_message(gid: str, cell: Any, points: float, max_points: float) -> str:
    """What decided an nbgrader test cell's score, in one line."""
    for output in cell.get("outputs", []):
        kind = output.get("output_type")
        if kind == "error":
            error = f"{output.get('ename', '')}: {output.get('evalue', '')}".rstrip(": ")
            if raised_in_hidden(str(cell.get("source", "")), output.get("traceback"),
                                execution_count(cell.get("execution_count"))):
                return cap_text(f"test cell {gid!r}: {hidden_failure(error)}")
            return cap_text(f"test cell {gid!r} failed: {error}")
        if kind == "stream" and output.get("name") == "stderr":
            return cap_text(f"test cell {gid!r} wrote to stderr (nbgrader scores that 0): "
                            f"{str(output.get('text', ''))[:300].strip()}")
        if kind == "execute_result":
            return f"test cell {gid!r}: partial credit {points:g} of {max_points:g}"
    return f"test cell {gid!r} passed"


def _outcome(part_id: str, test_id: str, record: RunRecord, outputs: dict[str, Any],
             done: sandbox.Result, problem: str, settings: Settings, skipped: str = ""
             ) -> tuple[str, str, Any]:
    """(status, message, results or None): the results when the student's process left some.

    ``record`` was written inside the sandbox (read field by field in ``trust.result``);
    ``skipped``: why cells after a timeout were not run (:func:`after_timeout`).
    """
    if part_id in outputs:
        return "", "", outputs[part_id]
    if done.killed:
        what = {"timeout": f"the notebook ran over its time budget of {settings.budget_s:g} s",
                "memory": f"the notebook used over {_peak(done):.0f} MB of memory "
                          f"(counted by {done.memory_accounting or 'the watchdog'})",
                "processes": f"the notebook started over {done.peak_tasks} processes/threads"}
        return STATUS_OF_KILL[done.killed], f"{what[done.killed]}; the sandbox was killed", None
    if problem:
        return ("refused" if problem.startswith("refused") else "crashed"), problem, None
    cell = record.cell(test_id)
    kernel, message = record.kernel, record.message
    if cell is None:
        return "crashed", message or "the test cell never ran", None
    status, error = cell.status, cell.error
    if status == "timeout":
        return "timeout", f"test cell {test_id!r}: {error}", None
    if status == "died" or (status == "not run" and kernel == "died"):
        return "crashed", message or "the kernel died", None
    if status == "not run" and kernel == "timeout" and skipped:
        return "not run", skipped, None
    if status == "not run":
        return "not run", message or "the test cell was not run", None
    if status == "error":
        return "error", f"test cell {test_id!r} failed: {error}", None
    return "no result", (f"test cell {test_id!r} ran but recorded no result for {part_id} "
                         "(was check replaced or the cell rewritten?)"), None


def after_timeout(record: RunRecord, exercise: Exercise, settings: Settings) -> str:
    """Why the cells after a timed-out one were not run ('' when none was skipped for that):
    written here from the record's cell index and the source's grade_ids, nothing the student
    wrote."""
    timed_out = next((c for c in record.cells if c.status == "timeout"), None)
    if record.kernel != "timeout" or timed_out is None:
        return ""
    where = cell_label(timed_out.index, timed_out.grade_id, exercise)
    return f"{AFTER_TIMEOUT}: {where} ran over {settings.timeout_s:g} s; the cells after it " \
        "were skipped"


def cell_label(index: int, gid: str, exercise: Exercise) -> str:
    """'cell 4 (the test of ex02.gflops)': a cell by its place in the notebook (counted from
    1, every cell) and what it is in the source; a grade_id the source lacks is not shown."""
    test_of = next((part for part, test_id in exercise.parts if test_id == gid), None)
    cell = next((c for c in exercise.notebook.cells if grade_id(c) == gid), None) if gid else None
    what = (f"the test of {test_of}" if test_of else
            f"the solution of `{gid}`" if cell is not None and is_solution(cell) else
            f"`{gid}`" if cell is not None else "")
    return f"cell {index + 1}" + (f" ({what})" if what else "")


def with_cause(message: str, test_id: str, record: RunRecord, prepared: Prepared,
               exercise: Exercise) -> str:
    """``message`` of a test cell that raised NameError, led by the earlier cell whose error
    left the name undefined: 'not graded: cell 3 (the solution of `gflops`) raised
    SyntaxError: invalid syntax (line 3); ...'. Unchanged when no such cell is found."""
    test = record.cell(test_id)
    if test is None or test.status != "error":
        return message
    cells = prepared.notebook.cells
    errors: list[tuple[int, CellError, str]] = []
    for entry in record.cells:
        error = parse_error(entry.error) if entry.status == "error" else None
        if error is not None and 0 <= entry.index < len(cells):
            errors.append((entry.index, error, str(cells[entry.index].get("source", ""))))
    found = cause_of(test.index, parse_error(test.error), errors)
    if found is None:
        return message
    index, error = found
    gid = grade_id(cells[index]) or ""
    return (f"not graded: {cell_label(index, gid, exercise)} raised {error}; so {message}")


def _peak(done: sandbox.Result) -> float:
    """The most memory the sandbox was seen to hold: shm, tmpfs and kernel memory included
    where they were counted, else its processes' resident memory."""
    return max(done.peak_memory_mb, done.peak_rss_mb)


@dataclass(frozen=True)
class Judged:
    """A check part's outcome: status, message, points, and which cases failed ("2, 5-7 of 7",
    the gradebook's failed_cases; empty when none did or no case was judged)."""

    status: str
    message: str
    points: float = 0.0
    failed: str = ""
    hints: str = ""  # the hints that recognised a failed case's mistake, "1:Mistake 3:Scalar"


def judge(part: Part, cases: list[tuple[Any, ...]], got: list[Any],
          source: str | None = None, missing: str = "", visible: int | None = None
          ) -> tuple[str, str]:
    """(status, message) of :func:`judge_part`."""
    judged = judge_part(part, cases, got, source, missing, visible)
    return judged.status, judged.message


def judge_part(part: Part, cases: list[tuple[Any, ...]], got: list[Any],
               source: str | None = None, missing: str = "", visible: int | None = None
               ) -> Judged:
    """Judge the student's raw results outside the sandbox, from data only.

    Each result is compared with the oracle on the same inputs (and checked against the inputs
    where the part says so); outputs the student's process only observed (counts, flags) are
    ignored. Every case is judged, so the gradebook lists each that failed. Parts that grade
    how a result was computed judge ``source``, the checked function's text found in the
    notebook (``trust.source``), and fail without it (``missing``: why, when the reader knows).

    ``visible``: how many of ``cases`` (the first ones) the student may see; the others are
    hidden and their messages show no value (``withhold``). The grader passes the count it drew
    itself (``judge_run``); None, for tests and tools on visible cases only: all visible.

    Points: all or nothing, or with ``part.partial`` each passed case's share
    (:func:`case_points`). A raised error costs its case; a failed ``source_check`` (how the
    function is written) costs the whole part.
    """
    n = len(cases)
    shown = n if visible is None else max(0, min(int(visible), n))
    if len(got) != n:
        return Judged("failed", f"results for {len(got)} of {n} cases")
    if n and all(isinstance(g, ErrorText) and str(g) == "not implemented yet" for g in got):
        return Judged("not implemented", "not implemented yet", failed=case_numbers(range(n), n))
    failures: list[tuple[int, str]] = []
    hints: dict[str, None] = {}  # in the order the failed cases show them
    for i, (args, result) in enumerate(zip(cases, got)):
        hidden = i >= shown
        verdict = judged_case(part, i, n, args, result, hidden)
        if not verdict.ok:
            failures.append((i, verdict.message))
            if verdict.hint:
                hints[verdict.hint] = None
    lost = {i for i, _ in failures}
    failed = case_numbers(lost, n)
    shares = case_points(part.points, n) if part.partial else []
    points = float(sum(s for i, s in enumerate(shares) if i not in lost))
    message = ""
    if failures:
        message = f"{n - len(failures)} of {n} cases passed; failed: {runs(lost)}"
        if shown < n:
            message += f" (cases {runs(range(shown, n))} are hidden)"
        message += f"\n{failures[0][1]}"
    named = " ".join(hints)
    if failures and points == 0:
        return Judged("failed", message, failed=failed, hints=named)
    verdict = judge_source(part, source, missing)
    if not verdict.ok:
        if failures:
            return Judged("failed", f"{message}\nand {verdict.message}: the whole part scores 0",
                          failed=failed, hints=named)
        return Judged("failed", f"the values are right, but {verdict.message}")
    if failures:
        return Judged("partial", message, points, failed, named)
    among = f" ({n - shown} of them hidden)" if shown < n else ""
    return Judged("passed", f"{n} cases passed{among}", float(part.points))


def judged_case(part: Part, i: int, n: int, args: tuple[Any, ...], recorded: Any,
                hidden: bool = False) -> Verdict:
    """One case's recorded result (or the error it raised) against the oracle, with what the
    guard saw the call do to its arguments: the verdict check() reaches on the same call."""
    result, found = unguarded(recorded)
    if isinstance(result, ErrorText):
        said = withheld_error(result) if hidden else str(result)
        case = f"{'hidden case' if hidden else 'case'} {i + 1} of {n}"
        if not found:
            return Verdict(False, f"{case} raised {said}")
        # a write that made the call fail afterwards: the write is the cause, said first
        verdict = Verdict(False, f"{case}: raised {said}")
    else:
        expected = oracle(part, args)  # the whole case; the rest sees what the student's got
        verdict = judge_case(part, i, n, given(args), expected,
                             trusted_result(part, expected, result), hidden=hidden)
    return guard.judged(part, i, n, given(args), found, verdict, hidden=hidden)


def case_points(points: float, n: int) -> list[Decimal]:
    """Each case's share of a part's points: exact decimals that sum to the points.

    In hundredths (or the points' own finer decimals), with up to two more decimals where that
    splits evenly (1 point over 8 cases: 0.125 each), else as evenly as possible with the
    leftover units going to the first cases (5 points over 3 cases: 1.67, 1.67, 1.66); more
    decimals still where there are more cases than units (0.01 over 3: 0.004, 0.003, 0.003)."""
    if n <= 0:
        return []
    total = Decimal(repr(float(points)))
    exponent = total.as_tuple().exponent
    places = max(2, -exponent if isinstance(exponent, int) else 0)
    even = [p for p in range(places, places + 3) if int(total.scaleb(p)) % n == 0]
    places = even[0] if even else places
    while 0 < total.scaleb(places) < n and places < 12:
        places += 1
    unit = Decimal(1).scaleb(-places)
    base, extra = divmod(int(total.scaleb(places)), n)
    return [(base + (1 if i < extra else 0)) * unit for i in range(n)]


def case_numbers(indices: Iterable[int], n: int) -> str:
    """Zero-based case indices as the gradebook lists them: '2, 5-7 of 7' ('' for none)."""
    shown = runs(indices)
    return f"{shown} of {n}" if shown else ""


def runs(indices: Iterable[int]) -> str:
    """Zero-based indices as one-based numbers, runs of three or more shortened: '2, 5-7'."""
    groups: list[list[int]] = []
    for k in sorted({i + 1 for i in indices}):
        if groups and k == groups[-1][-1] + 1:
            groups[-1].append(k)
        else:
            groups.append([k])
    return ", ".join(f"{g[0]}-{g[-1]}" if len(g) > 2 else ", ".join(map(str, g))
                     for g in groups)
