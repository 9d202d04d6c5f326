"""Receive: what came back from the sandbox, read with every bound and saved for the instructor.

The result (``trust.result``) and the executed notebook (``trust.notebook``) were written by the
student's process: nothing of them is trusted, and a broken or forged one can only cost that
student points. Of the executed notebook only the outputs and execution counts are taken,
checked and reduced; the notebook the instructor audits in ``autograded/`` is the restored one
(its sources are the ones that ran) with those outputs and counts, written compactly.

Kept for ``edu-dl replay`` in the submission's work folder (``OUT/.work/<student>/<exercise>/``,
the instructor's only): ``run.json`` (the sandbox's facts, the limits, the secret's fingerprint,
the submission's path and digest, why the result could not be read if it could not) and
``result.zip``: what the sandbox returned, without the executed notebook (its outputs are in
``autograded/`` already), at most ``--file-size`` MB, the bound it was read with. From them and
the re-derived inputs, replay judges the run again, exactly as it was judged.
"""

from __future__ import annotations

import copy
import hashlib
import io
import json
import zipfile
from dataclasses import asdict, dataclass
from pathlib import Path

from edu_dl.grading import sandbox
from edu_dl.grading.model import Job, Refused, safe_file_name
from edu_dl.grading.notebooks import Notebook, write_atomic
from edu_dl.grading.protocol import EXECUTED
from edu_dl.grading.settings import MB, Settings
from edu_dl.grading.stages.prepare import Prepared
from edu_dl.grading.trust.bounded import read_bounded
from edu_dl.grading.trust.notebook import Untrusted, compact_bytes, executed_cells
from edu_dl.grading.trust.result import RunResult, read_run
from edu_dl.grading.trust.text import visible

LOG_TAIL = 4000  # characters of the sandbox's log kept in run.json
MAX_RUN_RECORD = 16 << 20  # run.json holds capped facts (a log tail, the runner's record)
RUN_FILE, RESULT_FILE = "run.json", "result.zip"


@dataclass
class Ran:
    """What came back from the sandbox, read with every bound."""

    done: sandbox.Result
    returned: RunResult
    isolation: str
    executed: Notebook | None = None  # the restored notebook with the run's outputs
    unused: str = ""  # why the returned notebook's outputs were not used ("" when they were)


def received(prepared: Prepared, done: sandbox.Result, settings: Settings) -> Ran:
    """The sandbox's result read back with every bound; the executed notebook saved in
    autograded/, and what replays the run (run.json, the result, the submission) beside the
    submission's other files."""
    ran = read_back(prepared, done, settings)
    if ran.executed is not None:
        write_atomic(prepared.autograded, compact_bytes(ran.executed))
    facts = asdict(done) | {"log": visible(done.log[-LOG_TAIL:]),
                            "output": f"{done.output_size} bytes",
                            "uids_seen": sorted(done.uids_seen)}
    # Unread (over the limit, broken): run.json says why, and nothing more is kept.
    kept = without_notebook(done.output) if not ran.returned.problem else b""
    write_atomic(prepared.work / RESULT_FILE, kept)
    write_atomic(prepared.work / RUN_FILE, json.dumps(
        {"secret": prepared.fingerprint, "settings": asdict(settings),
         "submission": {"path": str(prepared.path.absolute()) if prepared.path else "",
                        "sha256": hashlib.sha256(prepared.submitted).hexdigest()},
         # relative to the output folder (OUT/.work/<student>/<exercise> is prepared.work)
         "autograded": str(prepared.autograded.relative_to(prepared.work.parents[2])),
         "executed": ran.executed is not None,
         "problem": ran.returned.problem, "record": asdict(ran.returned.record),
         "sandbox": facts, "executed notebook not used": ran.unused}, default=str).encode())
    return ran


def record_cost(out: Path, job: Job, spent: dict[str, float], since: float) -> None:
    """Add the grader's own cost of grading the submission (``cost.Cost.rounded``) to its
    run.json, if this run wrote it (``since``: when its grading began; a refused submission
    has none, or an older run's)."""
    path = out / ".work" / safe_file_name(job.student) / job.exercise.name / RUN_FILE
    try:
        if path.is_symlink() or path.stat().st_mtime < since:
            return
        facts = json.loads(read_bounded(path, MAX_RUN_RECORD, "for a run record"))
        facts["grader"] = spent
        write_atomic(path, json.dumps(facts).encode())
    except (Refused, OSError, ValueError):
        pass  # only the record of the cost is lost: the gradebook and the summary have it


def without_notebook(result: bytes) -> bytes:
    """The result zip (read already: STORED, bounded) without its executed notebook."""
    kept = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(result)) as zf, \
            zipfile.ZipFile(kept, "w", zipfile.ZIP_STORED) as new:
        for info in zf.infolist():
            if info.filename != EXECUTED:
                new.writestr(info.filename, zf.read(info))
    return kept.getvalue()


def isolation(done: sandbox.Result, settings: Settings) -> str:
    """The gradebook's sandbox column of a run: "bwrap", or what ran it without (a run stored
    before the settings carried the answer: "rlimits only")."""
    if done.isolated:
        return "bwrap"
    return settings.isolation() if settings.sandbox_problem else "rlimits only"


def read_back(prepared: Prepared, done: sandbox.Result, settings: Settings) -> Ran:
    """The sandbox's result read with every bound, and the restored notebook with the outputs
    it returned; writes nothing (``edu-dl replay`` reads a stored run with it)."""
    returned = read_run(done.output, done.output_size, settings.file_mb * MB,
                        settings.notebook_mb * MB + 2 * settings.output_cap)
    ran = Ran(done, returned, isolation(done, settings))
    if returned.executed:
        try:
            counts, outputs = executed_cells(returned.executed, prepared.notebook)
        except Untrusted as exc:  # forged or broken: the restored notebook stays as it is
            ran.unused = str(exc)
        else:
            ran.executed = with_outputs(prepared.notebook, outputs, counts)
    return ran


def with_outputs(nb: Notebook, outputs: list[list[dict[str, object]]],
                 counts: list[int | None] | None = None) -> Notebook:
    """A copy of ``nb`` whose code cells carry ``outputs`` (one list per cell) and execution
    ``counts`` (one per cell; None: the cells keep theirs)."""
    executed = copy.deepcopy(nb)
    for index, (cell, cell_outputs) in enumerate(zip(executed.cells, outputs)):
        if cell.get("cell_type") == "code":
            cell["outputs"] = cell_outputs
            if counts is not None:
                cell["execution_count"] = counts[index]
    return executed
