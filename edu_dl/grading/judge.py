"""Judge: the student's raw results against each part's oracle, here, outside the sandbox.

A part passes only on positive evidence: its results, compared with the oracle on the inputs drawn
in ``prepare``. Nothing the student's process prints, patches or exits with can make a wrong
answer pass. Graded cells that no part judges (nbgrader's assert cells, answers, tasks) are scored
as nbgrader scores them (``nbgrader.determine_grade``) or left to a person.
"""

from __future__ import annotations

import json
from typing import Any

import nbformat

from . import sandbox
from .model import OUTSIDE, Job, Row, cap_text
from .nbgrader import PartialCreditError, determine_grade, grade_id, nbgrader
from .prepare import Prepared
from .protocol import ErrorText
from .receive import Ran
from .restore import copy_cell
from .settings import Settings
from .source import judge_source
from .spec import Part, judge_case, trusted_result
from .trust.result import RunRecord
from .trust.source import SourceReader

STATUS_OF_KILL = {"timeout": "timeout", "memory": "memory", "processes": "processes"}


def judge_run(job: Job, prepared: Prepared, ran: Ran, settings: Settings) -> list[Row]:
    """One row per part: the student's raw results judged here, or why there are none."""
    returned = ran.returned
    sources = SourceReader(prepared.notebook)  # parses each cell once, for this submission only
    rows = []
    for part_id, test_id in job.exercise.parts:
        part = prepared.parts[part_id]
        status, message, got = _outcome(part_id, test_id, returned.record, returned.outputs,
                                        ran.done, returned.problem, settings)
        points = 0.0
        if got is not None:
            source = sources.find(part_id) if part.source_check else None
            status, message = judge(part, prepared.cases[part_id], got, source,
                                    sources.problems.get(part_id, ""))
            points = float(part.points) if status == "passed" else 0.0
        note = "; ".join(n for n in prepared.notes if f"'{test_id}'" in n)
        if note and status != "passed":
            message = f"{message} ({note})"
        rows.append(Row(job.student, job.exercise.name, part_id, points, float(part.points),
                        status, message, ran.isolation, OUTSIDE))
    return rows + judge_cells(job, prepared, ran, settings)


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
            row.status, row.message = "needs manual grading", "a task: graded by hand"
            row.answer = cap_text(f"(the task) {source[gid].get('source', '')}", 8000)
            continue
        if graded.kind == "answer":
            cell = _as_source(restored.get(gid), source[gid])
            row.answer = cap_text(str(cell.get("source", "")) if cell is not None else "", 8000)
            score = determine_grade(cell, max_points, job.exercise.checksums.get(gid)) \
                if cell is not None else 0.0
            if score is None:
                row.status, row.message = "needs manual grading", "an answer: graded by hand"
            else:
                row.status, row.message = "not answered", "the answer cell was left as released"
            continue
        status, message, _ = _outcome(f"test cell {gid!r}", gid, returned.record, {},
                                      ran.done, returned.problem, settings)
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
            return cap_text(f"test cell {gid!r} failed: {error}")
        if kind == "stream" and output.get("name") == "stderr":
            return cap_text(f"test cell {gid!r} wrote to stderr (nbgrader scores that 0): "
                            f"{str(output.get('text', ''))[:300].strip()}")
        if kind == "execute_result":
            return f"test cell {gid!r}: partial credit {points:g} of {max_points:g}"
    return f"test cell {gid!r} passed"


def _outcome(part_id: str, test_id: str, record: RunRecord, outputs: dict[str, Any],
             done: sandbox.Result, problem: str, settings: Settings) -> tuple[str, str, Any]:
    """(status, message, results or None): the results when the student's process left some.

    ``record`` was written inside the sandbox (read field by field in ``trust.result``).
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
    if status == "not run":
        return "not run", message or "the test cell was not run", None
    if status == "error":
        return "error", f"test cell {test_id!r} failed: {error}", None
    return "no result", (f"test cell {test_id!r} ran but recorded no result for {part_id} "
                         "(was check replaced or the cell rewritten?)"), None


def _peak(done: sandbox.Result) -> float:
    """The most memory the sandbox was seen to hold: shm, tmpfs and kernel memory included
    where they were counted, else its processes' resident memory."""
    return max(done.peak_memory_mb, done.peak_rss_mb)


def judge(part: Part, cases: list[tuple[Any, ...]], got: list[Any],
          source: str | None = None, missing: str = "") -> tuple[str, str]:
    """Judge the student's raw results outside the sandbox, from data only.

    Each result is compared with the oracle on the same inputs (and checked against the inputs
    where the part says so); outputs the student's process only observed (counts, flags) are
    ignored. Parts that grade how a result was computed judge ``source``, the checked function's
    text found in the notebook (``trust.source``), and fail without it (``missing``: why,
    when the reader knows).
    """
    if len(got) != len(cases):
        return "failed", f"results for {len(got)} of {len(cases)} cases"
    errors = [g for g in got if isinstance(g, ErrorText)]
    if errors and all(str(g) == "not implemented yet" for g in errors):
        return "not implemented", "not implemented yet"
    for i, (args, result) in enumerate(zip(cases, got)):
        if isinstance(result, ErrorText):
            return "failed", f"case {i + 1} of {len(cases)} raised {result}"
        expected = part.expected(*args)
        verdict = judge_case(part, i, len(cases), args, expected,
                             trusted_result(part, expected, result))
        if not verdict.ok:
            return "failed", verdict.message
    verdict = judge_source(part, source, missing)
    if not verdict.ok:
        return "failed", f"the values are right, but {verdict.message}"
    return "passed", f"{len(cases)} fresh cases passed"
