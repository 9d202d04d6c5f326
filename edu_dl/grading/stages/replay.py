"""``edu-dl replay OUT STUDENT EXERCISE --source SOURCE``: judge a stored run again, and show it.

For a disputed row. The run is not executed again: what the sandbox returned is kept with the
grades (``receive``: ``OUT/.work/<student>/<exercise>/`` holds run.json and result.zip, the
executed notebook lies in ``autograded/``), and the inputs are drawn again from the grading
secret, which gives the same inputs every time (``secret``). Replay restores the submitted
notebook (still in the submissions folder: its digest is checked) from the source, reads the
result with the same bounds (``trust.result``), judges it with the same ``judge.judge_run``, and
prints for each part and case the inputs, what the student's code returned, the expected value
and the verdict, then whether its rows equal the gradebook's (they do, unless the source, the
parts or the grader changed since).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np

from edu_dl.grading import protocol, sandbox
from edu_dl.grading.authoring.spec import judged_cases, oracle
from edu_dl.grading.model import Job, Refused, Row, safe_file_name
from edu_dl.grading.notebooks import NotebookError
from edu_dl.grading.protocol import ErrorText
from edu_dl.grading.settings import MB, Settings
from edu_dl.grading.stages.judge import judge_run, judged_case
from edu_dl.grading.stages.load import load_parts, load_source
from edu_dl.grading.stages.prepare import Prepared, draw_cases, restored_submission
from edu_dl.grading.stages.receive import RESULT_FILE, RUN_FILE, Ran, isolation
from edu_dl.grading.stages.secret import Secret, read_secret, secret_path
from edu_dl.grading.trust.bounded import read_bounded
from edu_dl.grading.trust.notebook import parse_notebook
from edu_dl.grading.trust.result import RunResult, parse_record, read_run

MAX_RUN_JSON = 8 * MB


class ReplayError(ValueError):
    """Nothing to replay (no stored run, another secret); the message says why."""


@dataclass
class CaseReplay:
    index: int
    hidden: bool
    args: tuple[Any, ...]
    got: Any
    expected: Any
    ok: bool
    message: str


@dataclass
class PartReplay:
    part_id: str
    cases: list[CaseReplay] = field(default_factory=list)
    returned: bool = True  # False: the run left no results for this part


@dataclass
class Replay:
    student: str
    exercise: str
    fingerprint: str
    rows: list[Row]  # judged again now
    kept: list[Row] | None  # what the gradebook holds (None: no kept rows found)
    parts: list[PartReplay]

    @property
    def same(self) -> bool:
        return self.kept is not None and [asdict(r) for r in self.rows] == \
            [asdict(r) for r in self.kept]


def replay(out: Path, student: str, exercise: str, source: Path,
           secret: Secret | None = None, kept: list[Row] | None = None) -> Replay:
    """The stored run of (student, exercise) in ``out`` judged again against ``source``;
    ``kept``: the rows the gradebook holds for it (the term reads them from its database),
    which the replay's rows are compared with."""
    work = out / ".work" / safe_file_name(student) / exercise
    if not (work / RUN_FILE).is_file():
        raise ReplayError(f"{work}: no stored run of {student!r} for {exercise!r} (nothing "
                          "ran: its rows say why; or it was graded by an older edu-dl)")
    try:
        stored = json.loads(read_bounded(work / RUN_FILE, MAX_RUN_JSON, "for run.json"))
        settings = Settings(**stored["settings"])
        fingerprint = str(stored["secret"])
        facts = dict(stored["sandbox"])
    except (Refused, OSError, ValueError, KeyError, TypeError) as exc:
        raise ReplayError(f"{work / RUN_FILE}: not a run this grader stored ({exc})") from None
    secret = secret or read_secret(secret_path(out))
    if secret.fingerprint != fingerprint:
        raise ReplayError(f"the run was graded with the secret {fingerprint}; this one is "
                          f"{secret.fingerprint} (rotated since?): pass the old one with "
                          "--secret-file, or grade again")
    exercises = load_source(source, exclude=(out,), settings=settings, log=lambda s: None)
    if exercise not in exercises:
        raise ReplayError(f"{source}: no source notebook {exercise}.ipynb")
    load_parts(exercises, source)
    ex = exercises[exercise]
    try:
        where = Path(stored["submission"]["path"])
        submitted = read_bounded(where, settings.notebook_mb * MB)
        output = read_bounded(work / RESULT_FILE, settings.file_mb * MB, "for a result")
    except (Refused, OSError, KeyError, TypeError) as exc:
        raise ReplayError(f"{work}: the stored run or its submission cannot be read ({exc})"
                          ) from None
    if hashlib.sha256(submitted).hexdigest() != stored["submission"].get("sha256"):
        raise ReplayError(f"{where} changed since it was graded: grade it again")
    job = Job(student, ex, where, exercise)
    restored = restored_submission(job, settings, submitted)
    if isinstance(restored, list):  # cannot happen for a run that ran; say so if it does
        raise ReplayError(f"{where}: {restored[0].message}")
    nb, notes, data = restored
    drawn = draw_cases(job, secret)
    prepared = Prepared(nb, notes, work, out / stored["autograded"], secret.fingerprint,
                        {p: ex.specs[p] for p in drawn},
                        {p: judged_cases(cases) for p, (cases, _) in drawn.items()}, {}, "",
                        bool(facts.get("isolated", True)),
                        {p: visible for p, (_, visible) in drawn.items()}, data, where)
    ran = _ran(stored, facts, output, prepared, settings)
    rows = judge_run(job, prepared, ran, settings)
    parts = []
    for part_id, _ in ex.parts:
        part, cases = prepared.parts[part_id], prepared.cases[part_id]
        n_visible = prepared.visible[part_id]
        got = ran.returned.outputs.get(part_id)
        parts.append(PartReplay(part_id, _cases(part, cases, got, n_visible), got is not None))
    return Replay(student, exercise, fingerprint, rows, kept, parts)


def _ran(stored: dict[str, Any], facts: dict[str, Any], output: bytes, prepared: Prepared,
         settings: Settings) -> Ran:
    """What came back from the sandbox, as ``receive.read_back`` read it: the result (without
    the executed notebook, whose outputs are the ones saved in autograded/)."""
    done = _result(facts, output)
    problem = str(stored.get("problem", ""))
    if problem:  # nothing of it was read, then or now
        returned = RunResult(parse_record(stored.get("record")), {}, problem)
    else:
        returned = read_run(output, len(output), settings.file_mb * MB,
                            settings.notebook_mb * MB + 2 * settings.output_cap)
    ran = Ran(done, returned, isolation(done, settings),
              unused=str(stored.get("executed notebook not used", "")))
    if stored.get("executed"):
        try:
            ran.executed = parse_notebook(read_bounded(
                prepared.autograded, settings.notebook_mb * MB + 4 * settings.output_cap),
                prepared.autograded.name)
        except (Refused, OSError, NotebookError) as exc:
            raise ReplayError(f"{prepared.autograded}: the executed notebook cannot be read "
                              f"({exc})") from None
    return ran


def _result(facts: dict[str, Any], output: bytes) -> sandbox.Result:
    """The sandbox.Result run.json recorded, with the result it returned."""
    names = {f.name for f in fields(sandbox.Result)}
    kept = {k: v for k, v in facts.items() if k in names}
    kept["output"] = output
    kept["uids_seen"] = set(kept.get("uids_seen", ()))
    kept["notes"] = list(kept.get("notes", ()))
    return sandbox.Result(**kept)


def _cases(part: Any, cases: list[tuple[Any, ...]], got: list[Any] | None,
           n_visible: int) -> list[CaseReplay]:
    """Each case's verdict, as ``judge.judge`` reaches it (it stops at the first failure)."""
    if got is None:
        return [CaseReplay(i, i >= n_visible, args, None, _expected(part, args), False,
                           "no result") for i, args in enumerate(cases)]
    found = []
    for i, args in enumerate(cases):
        result = got[i] if i < len(got) else ErrorText("no result for this case")
        expected = _expected(part, args)
        value, guarded = protocol.unguarded(result)
        if isinstance(value, ErrorText) and not guarded:
            ok, message = False, f"raised {value}"
        else:  # as judge_part judges it, the guard's findings included
            verdict = judged_case(part, i, len(cases), args, result)
            ok, message = verdict.ok, verdict.message
        found.append(CaseReplay(i, i >= n_visible, args, value, expected, ok, message))
    return found


def _expected(part: Any, args: tuple[Any, ...]) -> Any:
    try:
        return oracle(part, args)
    except Exception as exc:
        return f"(the oracle raised {type(exc).__name__}: {exc})"


def show(value: Any, full: bool = False) -> str:
    """A value for the instructor: arrays with shape and dtype, then their values."""
    options = {"threshold": np.inf} if full else {"threshold": 60, "edgeitems": 3}
    with np.printoptions(**options, linewidth=100):
        if isinstance(value, np.ndarray):
            return f"array{value.shape} {value.dtype}: " + np.array2string(value)
        if isinstance(value, tuple | list):
            return "(" + ", ".join(show(v, full) for v in value) + ")"
        text = repr(value)
    return text if full or len(text) <= 400 else f"{text[:400]} ..."


def replay_text(found: Replay, full: bool = False) -> str:
    """What replay prints: per part and case, the inputs, the result, the verdict; the rows."""
    lines = [f"replay of {found.student!r}, {found.exercise} (secret {found.fingerprint})"]
    for part in found.parts:
        lines.append(f"part {part.part_id}:" + ("" if part.returned else
                                                "  (the run left no results for it)"))
        for case in part.cases:
            kind = "hidden" if case.hidden else "visible"
            lines.append(f"  case {case.index + 1} ({kind}): "
                         + ("ok" if case.ok else "WRONG"))
            lines.append(f"    inputs:   {show(case.args, full)}")
            lines.append(f"    returned: {show(case.got, full)}")
            lines.append(f"    expected: {show(case.expected, full)}")
            if not case.ok:
                lines += [f"    {line}" for line in case.message.splitlines()]
    lines.append("rows (judged again now):")
    for row in found.rows:
        lines.append(f"  {row.part}: {row.points:g}/{row.max_points:g} {row.status}"
                     + (f"  {row.message.splitlines()[0]}" if row.message else ""))
    if found.kept is None:
        lines.append("the gradebook holds no kept rows for it to compare with")
    elif found.same:
        lines.append("the same rows as the gradebook's: points, statuses and messages")
    else:
        lines.append("DIFFERENT from the gradebook's rows (the source, the parts or the grader "
                     "changed since it was graded?):")
        for row in found.kept:
            lines.append(f"  {row.part}: {row.points:g}/{row.max_points:g} {row.status}")
    return "\n".join(lines)

