"""Prepare: read, parse and restore one submission, and draw the hidden inputs of each part.

What the sandbox will get is decided here, on the trusted side: the restored notebook, the files
beside the source, each part's inputs (and its pickled ``call=``). The inputs stay here too, to
judge against. They are drawn from the grading secret and the part alone (``secret.Secret.seed``):
the same for every submission and every run, so the same answer gets the same grade.
"""

from __future__ import annotations

import copy
import shutil
import tempfile
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from edu_dl.grading import protocol
from edu_dl.grading.authoring.spec import Part, given, judged_cases
from edu_dl.grading.model import Job, Refused, Row, rows_for, safe_file_name
from edu_dl.grading.notebooks import Notebook, NotebookError, write_atomic
from edu_dl.grading.protocol import encode_inputs
from edu_dl.grading.settings import MB, Settings
from edu_dl.grading.stages.restore import is_other_exercise, restore
from edu_dl.grading.stages.secret import Secret
from edu_dl.grading.trust.bounded import read_bounded
from edu_dl.grading.trust.files import read_package
from edu_dl.grading.trust.notebook import TooLarge, compact_bytes, parse_notebook


@dataclass
class Prepared:
    """A submission ready to run: the restored notebook, the files handed to the sandbox, and
    the inputs drawn for each part (kept here, on the trusted side, to judge against)."""

    notebook: Notebook  # restored: every locked cell from the source, hidden tests included
    notes: list[str]  # what restoring changed ("cell 'x' was edited; restored ...")
    work: Path  # the grader's own folder for this submission (run.json)
    autograded: Path  # where the (executed) restored notebook is saved
    fingerprint: str  # of the secret the inputs were drawn from (secret.Secret)
    parts: dict[str, Part]
    cases: dict[str, list[tuple[Any, ...]]]
    files: dict[str, bytes]  # path inside the sandbox -> bytes, all read-only
    root: str  # the sandbox's folder for work/ and grading/
    # False: no bwrap, the same run unisolated in ``root``, a fresh private folder
    # (sandbox.fallback_folder's kind) the caller removes after the run
    boxed: bool
    visible: dict[str, int] = field(default_factory=dict)  # part id -> its visible cases
    submitted: bytes = b""  # the notebook as submitted (its digest is kept with the run)
    path: Path | None = None  # where it was submitted


def prepare(job: Job, out: Path, settings: Settings, data: bytes | None, secret: Secret,
            boxed: bool | None = None) -> Prepared | list[Row]:
    """Read, parse and restore the submission, draw its inputs from ``secret``; rows instead
    when there is nothing to run (missing, refused, unreadable, another exercise's notebook).
    ``boxed``: will it run in bwrap (default: ``settings``' answer for this run; a cluster's
    workers say for themselves)."""
    restored_nb = restored_submission(job, settings, data)
    if isinstance(restored_nb, list):
        return restored_nb
    nb, notes, data = restored_nb
    work = out / ".work" / safe_file_name(job.student) / job.exercise.name
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    restored = compact_bytes(nb)  # student data: within a small factor of what was read
    # nbgrader's layout: autograded/<student>/<assignment>/<notebook> (instructor-only: it
    # holds the hidden tests).
    autograded = (out / "autograded" / safe_file_name(job.student)
                  / safe_file_name(job.assignment) / f"{job.exercise.name}.ipynb")
    write_atomic(autograded, restored)
    if boxed is None:  # else: the same run in a private folder, unisolated, as another uid
        boxed = settings.boxed
    root = "/tmp" if boxed else tempfile.mkdtemp(prefix="edu-dl-unboxed-")
    files = {f"{root}/work/{name}": beside for name, beside in job.exercise.files.items()}
    files.update({f"{root}/work/{job.exercise.package}/{name}": module
                  for name, module in job.package.items()})
    files[f"{root}/work/notebook.ipynb"] = restored
    prepared = Prepared(nb, notes, work, autograded, secret.fingerprint, {}, {}, files, root,
                        boxed, {}, data, job.path)
    try:
        for part_id, _ in job.exercise.parts:
            drawn = drawn_part(job, part_id, secret)
            prepared.parts[part_id] = job.exercise.specs[part_id]
            prepared.visible[part_id] = drawn.visible  # the rest are hidden: judge shows no value
            # the sandbox gets each case without its withheld values; the judge, all of it,
            # a copy of its own (an oracle that writes into its arguments reaches nobody else)
            prepared.files.update(grading_files(f"{root}/grading", part_id, drawn.inputs,
                                                job.exercise.calls.get(part_id)))
            prepared.cases[part_id] = copy.deepcopy(drawn.cases)
    except BaseException:
        if not boxed:  # nothing will run in it
            shutil.rmtree(root, ignore_errors=True)
        raise
    return prepared


@dataclass(frozen=True)
class Drawn:
    """One part's inputs, the same for every submission of the exercise: the cases as the judge
    reads them, how many of them are visible, and the npz the sandbox gets (without the
    withheld values)."""

    cases: list[tuple[Any, ...]]
    visible: int
    inputs: bytes


# A part's cases are the same for every student: drawn, encoded for the sandbox and read back
# once per (exercise, its source and part files, part, seed) in this process, the most recent
# MAX_DRAWN kept (exercise 24's hidden sample and its 1 MB of cases: 0.24 s of the grader's CPU
# for every student after the first, before).
MAX_DRAWN = 64
_DRAWN: OrderedDict[tuple[str, str, str, str, int], Drawn] = OrderedDict()
_DRAWN_LOCK = threading.Lock()
_DRAWING: dict[tuple[str, str, str, str, int], threading.Lock] = {}  # a key being drawn now


def drawn_part(job: Job, part_id: str, secret: Secret) -> Drawn:
    """``part_id``'s inputs for ``job``'s exercise, drawn from ``secret`` (as ``draw_cases``
    draws them), once for every submission of the exercise; callers copy what they change."""
    seed = secret.seed(job.exercise.name, part_id)
    key = (job.exercise.name, job.exercise.digest, job.exercise.specs_digest, part_id, seed)
    with _DRAWN_LOCK:
        drawing = _DRAWING.setdefault(key, threading.Lock())
    # Submissions are prepared ahead, several at once: the first draws, the others wait for it.
    with drawing:
        with _DRAWN_LOCK:
            found = _DRAWN.get(key)
            if found is not None:
                _DRAWN.move_to_end(key)
                return found
        try:
            cases, visible = draw_part(job.exercise.specs[part_id], seed)
            found = Drawn(judged_cases(cases), visible, encode_inputs([given(c) for c in cases]))
            with _DRAWN_LOCK:
                _DRAWN[key] = found
                while len(_DRAWN) > MAX_DRAWN:
                    _DRAWN.popitem(last=False)
        finally:
            with _DRAWN_LOCK:
                _DRAWING.pop(key, None)
    return found


def draw_cases(job: Job, secret: Secret) -> dict[str, tuple[list[tuple[Any, ...]], int]]:
    """Each part's inputs, visible then hidden, and how many are visible, from its own seed:
    derived from the secret and the part alone, so every submission of the exercise gets the
    same ones on every run."""
    return {part_id: draw_part(job.exercise.specs[part_id], secret.seed(job.exercise.name,
                                                                        part_id))
            for part_id, _ in job.exercise.parts}


def draw_part(part: Part, seed: int) -> tuple[list[tuple[Any, ...]], int]:
    """One part's cases from ``seed``, visible then hidden, and how many are visible."""
    rng = np.random.default_rng(seed)
    visible = part.cases(rng, False)
    return [*visible, *part.cases(rng, True)], len(visible)


def restored_submission(job: Job, settings: Settings, data: bytes | None
                        ) -> tuple[Notebook, list[str], bytes] | list[Row]:
    """The submission read, parsed and restored from the source (with what restoring
    changed, and the bytes read), or the rows saying why there is nothing to run. Writes
    nothing."""
    if job.refused:
        return rows_for(job, "refused", job.refused, settings.isolation())
    if job.path is None:
        return rows_for(job, "missing", f"no {job.exercise.name}.ipynb was submitted",
                        settings.isolation())
    try:
        data = read_bounded(job.path, settings.notebook_mb * MB) if data is None else data
        submitted = parse_notebook(data, job.path.name)
    except (Refused, TooLarge) as exc:
        return rows_for(job, "refused", str(exc), settings.isolation())
    except NotebookError as exc:
        return rows_for(job, "unreadable", str(exc), settings.isolation())
    code, limit = code_cells(submitted), code_cell_limit(job.exercise.notebook)
    if code > limit:
        return rows_for(job, "refused", f"{job.path.name} has {code:,} code cells, over the "
                        f"limit of {limit} for {job.exercise.name} ({CODE_CELLS_FACTOR} times "
                        f"its source's {code_cells(job.exercise.notebook)}, at least "
                        f"{MIN_CODE_CELL_LIMIT}): the sandbox runs every code cell; not run",
                        settings.isolation())
    if is_other_exercise(submitted, job.exercise.notebook):
        return rows_for(job, "wrong notebook", f"{job.path.name} holds none of the cells of "
                        f"{job.exercise.name} (a notebook for another exercise?)",
                        settings.isolation())
    return (*restore(submitted, job.exercise.notebook), data)


# A submission may hold this many times its source's code cells (a student's own scratch cells),
# and never fewer than the minimum: each costs the sandbox a kernel round trip (10,000 cells of
# `pass` took 257 s), and no course notebook comes near (the largest source has 26).
CODE_CELLS_FACTOR = 5
MIN_CODE_CELL_LIMIT = 200


def code_cells(nb: Notebook) -> int:
    """How many code cells ``nb`` has."""
    return sum(cell.get("cell_type") == "code" for cell in nb.cells)


def code_cell_limit(source: Notebook) -> int:
    """How many code cells a submission of ``source``'s exercise may have."""
    return max(MIN_CODE_CELL_LIMIT, CODE_CELLS_FACTOR * code_cells(source))


def submission_bytes(job: Job, settings: Settings) -> bytes | None:
    """The bytes to grade (None: nothing to read, or refused; grade_one says why). Read with
    them: the student's own package beside the notebook, where the exercise has one
    (``job.package``); a package that cannot be read refuses the submission, saying why."""
    if job.path is None or job.refused:
        return None
    try:
        data = read_bounded(job.path, settings.notebook_mb * MB)
        if job.exercise.package:
            job.package = read_package(job.path.parent / job.exercise.package)
    except Refused as exc:
        job.refused = str(exc)
        return None
    return data


def grading_files(grading_dir: str, part_id: str, inputs: bytes,
                  call: bytes | None) -> dict[str, bytes]:
    """What the sandbox gets for one part: its cases (``inputs``, as ``encode_inputs`` wrote
    them) and, if it has one, its pickled call=."""
    files = {protocol.inputs_path(grading_dir, part_id): inputs}
    if call is not None:
        files[protocol.call_path(grading_dir, part_id)] = call
    return files
