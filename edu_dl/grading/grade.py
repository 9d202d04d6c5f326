"""``edu-dl grade``: grade a folder of submissions, each in its own sandbox, judged outside it.

For one submission: restore every test and locked cell from the source by grade_id (hidden tests
come with them), draw fresh inputs for each part from a secret seed, run the notebook in a bwrap
sandbox (``edu_dl.grading.runner`` executes it there), read back the student's raw results and
compare them here with the part's oracle. A part passes only on that positive evidence: nothing the
student's process prints, patches or exits with can make a wrong answer pass.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from . import sandbox
from .checking import ErrorText, Part, judge_case, roundtrip, trusted_result, write_inputs
from .model import Exercise, Job, Row, Summary, safe_file_name
from .notebooks import (
    Notebook,
    NotebookError,
    check_calls,
    grade_id,
    is_locked,
    is_solution,
    notebook_bytes,
    read_notebook,
    write_atomic,
)
from .report import write_outputs
from .results import read_result
from .source import find_source, judge_source

GRADER_VERSION = "1"  # bump to force a regrade of everything
RESULT_FILE = "result.zip"
GRADING_TMP_MB = 128  # the grading dir's own tmpfs: a student filling /tmp cannot block results
STATUS_OF_KILL = {"timeout": "timeout", "memory": "memory", "processes": "processes"}


@dataclass(frozen=True)
class Settings:
    """What the instructor chose on the command line."""

    timeout_s: float = 60.0  # per cell
    memory_mb: int = 4096
    cpu_s: int = 900
    processes: int = 512  # threads count: TF and torch start dozens
    file_mb: int = 64
    tmp_mb: int = 512
    output_cap: int = 1 << 20  # bytes of cell output the runner keeps

    def limits(self, n_cells: int) -> sandbox.Limits:
        # The runner's own per-cell timeouts (plus an interrupt probe) fire first; the wall
        # limit only catches a runner that hangs itself.
        wall = 90.0 + n_cells * (self.timeout_s + 15.0)
        return sandbox.Limits(wall_s=wall, memory_mb=self.memory_mb, cpu_s=self.cpu_s,
                              processes=self.processes, file_mb=self.file_mb, tmp_mb=self.tmp_mb)


# --------------------------------------------------------------------------- collecting


def load_source(source: Path) -> dict[str, Exercise]:
    """The exercises of the source folder, by notebook name (e.g. '05_autograd_from_scratch')."""
    paths = sorted(source.glob("*.ipynb")) if source.is_dir() else [source]
    if not paths:
        raise NotebookError(f"{source}: no source notebooks (*.ipynb) here")
    exercises = {}
    for path in paths:
        nb = read_notebook(path)
        ex = Exercise(path.stem, nb, hashlib.sha256(path.read_bytes()).hexdigest())
        for cell in nb.cells:
            gid = grade_id(cell)
            if gid is not None and cell.cell_type == "code":
                for part_id in dict.fromkeys(check_calls(cell.source)):
                    if all(part_id != p for p, _ in ex.parts):
                        ex.parts.append((part_id, gid))
        exercises[ex.name] = ex
    return exercises


def collect(submissions: Path, exercises: dict[str, Exercise]) -> tuple[list[Job], list[Row]]:
    """Jobs for ``<student>/<NN_name>.ipynb`` or ``submitted/<student>/<assignment>/*.ipynb``.

    Every student gets a job per exercise (a missing notebook is graded as missing); a notebook
    that matches no exercise gets a row of its own.
    """
    if not submissions.is_dir():
        raise NotebookError(f"{submissions}: not a folder of submissions")
    root = submissions / "submitted" if (submissions / "submitted").is_dir() else submissions
    jobs: list[Job] = []
    extra: list[Row] = []
    for student_dir in sorted(p for p in root.iterdir() if p.is_dir() and not _ignored(p.name)):
        found: dict[str, tuple[Path, str]] = {}
        for path in sorted(student_dir.rglob("*.ipynb")):
            if any(_ignored(part) for part in path.relative_to(student_dir).parts):
                continue
            assignment = path.parent.name if path.parent != student_dir else path.stem
            if path.stem in exercises and path.stem not in found:
                found[path.stem] = (path, assignment)
            else:
                extra.append(Row(student_dir.name, path.stem, "", 0.0, 0.0, "not an exercise",
                                 f"{path.relative_to(root)} matches no source notebook "
                                 f"({', '.join(exercises)}); not graded"))
        for name, ex in exercises.items():
            hit = found.get(name)
            jobs.append(Job(student_dir.name, ex, hit[0] if hit else None,
                            hit[1] if hit else name))
    return jobs, extra


def _ignored(name: str) -> bool:
    return name.startswith(".") or name in ("__pycache__", ".ipynb_checkpoints")


# --------------------------------------------------------------------------- restoring


def restore(submitted: Notebook, source: Notebook) -> tuple[Notebook, list[str]]:
    """The submission with every locked cell of the source back in place; returns (nb, notes).

    Locked cells (tests with their hidden region, read-only setup) are replaced by the source's
    cell with the same grade_id; deleted ones are inserted after their source predecessor.
    Solution cells are the student's, and are never filled in from the source.
    """
    locked = {grade_id(c): c for c in source.cells if grade_id(c) and is_locked(c)}
    notes: list[str] = []
    cells = []
    for cell in submitted.cells:
        gid = grade_id(cell)
        if gid in locked:
            original = locked[gid]
            if cell.get("source") != original.source.split("### BEGIN HIDDEN")[0].rstrip() and \
                    cell.get("source") != original.source:
                notes.append(f"cell {gid!r} was edited; restored from the source")
            cell = _copy_cell(original)
        elif cell.get("cell_type") == "code":
            cell = _copy_cell(cell)
        cells.append(cell)
    present = [grade_id(c) for c in cells]
    for position, original in enumerate(source.cells):
        gid = grade_id(original)
        if not gid or gid not in locked or gid in present:
            continue
        notes.append(f"cell {gid!r} was missing; restored from the source")
        before = [grade_id(c) for c in source.cells[:position]]
        anchor = next((present.index(b) for b in reversed(before) if b in present), -1)
        cells.insert(anchor + 1, _copy_cell(original))
        present.insert(anchor + 1, gid)
    nb = source.copy()
    nb.cells = cells
    return nb, notes


def _copy_cell(cell: Any) -> Any:
    import nbformat

    if cell.get("cell_type") != "code":
        return nbformat.from_dict(json.loads(json.dumps(cell)))
    new = nbformat.v4.new_code_cell(cell.get("source", ""))
    new.metadata = nbformat.from_dict(json.loads(json.dumps(cell.get("metadata", {}))))
    return new


def is_other_exercise(submitted: Notebook, source: Notebook) -> bool:
    """True when the submission shares no graded or solution cell id with its source."""
    ids = {grade_id(c) for c in source.cells if grade_id(c) and (is_solution(c) or is_locked(c))}
    return bool(ids) and not ids & {grade_id(c) for c in submitted.cells}


# --------------------------------------------------------------------------- one submission


def grade_one(job: Job, out: Path, settings: Settings, hide: list[Path]) -> list[Row]:
    """Grade one (student, exercise); never raises: every outcome becomes rows."""
    try:
        return _grade_one(job, out, settings, hide)
    except Exception as exc:  # a grader bug must not stop the batch
        return _rows(job, "grader error", f"{type(exc).__name__}: {exc}")


def _rows(job: Job, status: str, message: str, isolation: str = "") -> list[Row]:
    return [Row(job.student, job.exercise.name, part_id, 0.0, _points(part_id), status, message,
                isolation or _isolation()) for part_id, _ in job.exercise.parts]


def _points(part_id: str) -> float:
    from .parts import get

    try:
        return float(get(part_id).points)
    except KeyError:
        return 0.0


def _isolation() -> str:
    return "rlimits only" if sandbox.bwrap_problem() else "bwrap"


def _grade_one(job: Job, out: Path, settings: Settings, hide: list[Path]) -> list[Row]:
    from .parts import get

    if job.path is None:
        return _rows(job, "missing", f"no {job.exercise.name}.ipynb was submitted")
    try:
        submitted = read_notebook(job.path)
    except NotebookError as exc:
        return _rows(job, "unreadable", str(exc))
    if is_other_exercise(submitted, job.exercise.notebook):
        return _rows(job, "wrong notebook", f"{job.path.name} holds none of the cells of "
                     f"{job.exercise.name} (a notebook for another exercise?)")
    nb, notes = restore(submitted, job.exercise.notebook)
    work = out / ".work" / safe_file_name(job.student) / job.exercise.name
    shutil.rmtree(work, ignore_errors=True)
    (work / "inputs").mkdir(parents=True)
    write_atomic(work / "notebook.ipynb", notebook_bytes(nb))
    # nbgrader's layout: autograded/<student>/<assignment>/<notebook> (instructor-only: it
    # holds the hidden tests).
    write_atomic(out / "autograded" / safe_file_name(job.student) / safe_file_name(job.assignment)
                 / f"{job.exercise.name}.ipynb", notebook_bytes(nb))
    # Fresh inputs from a secret seed: what a student saw while working tells nothing.
    seed = secrets.randbits(63)
    rng = np.random.default_rng(seed)
    cases: dict[str, list[tuple[Any, ...]]] = {}
    parts: dict[str, Part] = {}
    for part_id, _ in job.exercise.parts:
        parts[part_id] = part = get(part_id)
        drawn = [*part.cases(rng, False), *part.cases(rng, True)]
        write_inputs(work / "inputs" / f"{part_id}.npz", drawn)
        cases[part_id] = roundtrip(drawn)  # exactly what the student's function receives
    (work / RESULT_FILE).write_bytes(b"")
    n_cells = sum(1 for c in nb.cells if c.cell_type == "code")
    limits = settings.limits(n_cells)
    boxed = not sandbox.bwrap_problem()  # else: the same run in the work folder, unisolated
    grading_dir, result_file = ("/tmp/grading", f"/tmp/{RESULT_FILE}") if boxed else (
        str(work), str(work / RESULT_FILE))
    notebook = "/tmp/work/notebook.ipynb" if boxed else str(work / "notebook.ipynb")
    argv = [sandbox.python(), "-m", "edu_dl.grading.runner", notebook, grading_dir,
            "--result", result_file, "--timeout", f"{settings.timeout_s:g}",
            "--output-cap", str(settings.output_cap)]
    done = sandbox.run(
        argv, limits=limits, hide=hide, env=sandbox_env("/tmp" if boxed else str(work / "tmp")),
        ro_binds=[(work / "notebook.ipynb", "/tmp/work/notebook.ipynb"),
                  (work / "inputs", "/tmp/grading/inputs")],
        rw_binds=[(work / RESULT_FILE, f"/tmp/{RESULT_FILE}")],
        cwd="/tmp/work", fallback_dir=work, tmpfs=[("/tmp/grading", GRADING_TMP_MB)],
    )
    isolation = "bwrap" if done.isolated else "rlimits only"
    record, outputs, problem = read_result(work / RESULT_FILE, settings.file_mb << 20)
    (work / "run.json").write_text(json.dumps(
        {"seed": seed, "record": record, "sandbox": asdict(done) | {"log": done.log[-4000:]}},
        indent=1, default=str))
    rows = []
    for part_id, test_id in job.exercise.parts:
        status, message, got = _outcome(part_id, test_id, record, outputs, done, problem)
        points = 0.0
        if got is not None:
            source = find_source(nb, part_id) if parts[part_id].source_check else None
            status, message = judge(parts[part_id], cases[part_id], got, source)
            points = float(parts[part_id].points) if status == "passed" else 0.0
        note = "; ".join(n for n in notes if f"'{test_id}'" in n)
        if note and status != "passed":
            message = f"{message} ({note})"
        rows.append(Row(job.student, job.exercise.name, part_id, points,
                        float(parts[part_id].points), status, message, isolation))
    _clean_work(work)
    return rows


def _clean_work(work: Path) -> None:
    """Keep run.json (seed, cell record, sandbox log) for the instructor; drop the bulk."""
    for name in ("inputs", RESULT_FILE):
        path = work / name
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)


def sandbox_env(tmp: str = "/tmp") -> dict[str, str]:
    """The sandbox's whole environment: no secrets of the grader, one thread per library."""
    package_root = str(Path(__file__).resolve().parents[2])
    venv_bin = str(Path(sys.executable).parent)
    one = "1"
    return {
        "PATH": f"{venv_bin}:/usr/local/bin:/usr/bin:/bin", "HOME": f"{tmp}/home",
        "PYTHONPATH": package_root, "PYTHONNOUSERSITE": one, "PYTHONDONTWRITEBYTECODE": one,
        "JUPYTER_RUNTIME_DIR": f"{tmp}/runtime", "IPYTHONDIR": f"{tmp}/ipython",
        "MPLCONFIGDIR": f"{tmp}/mpl", "TMPDIR": tmp, "MPLBACKEND": "Agg",
        "TF_CPP_MIN_LOG_LEVEL": "3",
        # Parallel jobs share the cores: one thread per library keeps them from fighting.
        "OMP_NUM_THREADS": one, "OPENBLAS_NUM_THREADS": one, "MKL_NUM_THREADS": one,
        "TF_NUM_INTRAOP_THREADS": one, "TF_NUM_INTEROP_THREADS": one, "LANG": "C.UTF-8",
    }


def _outcome(part_id: str, test_id: str, record: dict[str, Any], outputs: dict[str, Any],
             done: sandbox.Result, problem: str) -> tuple[str, str, Any]:
    """(status, message, results or None): the results when the student's process left some."""
    if part_id in outputs:
        return "", "", outputs[part_id]
    if done.killed:
        what = {"timeout": f"the notebook ran over its {done.seconds:.0f} s wall-time limit",
                "memory": f"the notebook used over {done.peak_rss_mb:.0f} MB of memory",
                "processes": f"the notebook started over {done.peak_tasks} processes/threads"}
        return STATUS_OF_KILL[done.killed], f"{what[done.killed]}; the sandbox was killed", None
    if problem:
        return "crashed", problem, None
    cell = next((c for c in record.get("cells", []) if c.get("grade_id") == test_id), None)
    kernel = record.get("kernel", "")
    if cell is None:
        return "crashed", record.get("message") or "the test cell never ran", None
    status = cell.get("status", "")
    if status == "timeout":
        return "timeout", f"test cell {test_id!r}: {cell.get('error')}", None
    if status == "died" or (status == "not run" and kernel == "died"):
        return "crashed", record.get("message") or "the kernel died", None
    if status == "not run":
        return "not run", record.get("message") or "the test cell was not run", None
    if status == "error":
        return "error", f"test cell {test_id!r} failed: {cell.get('error')}", None
    return "no result", (f"test cell {test_id!r} ran but recorded no result for {part_id} "
                         "(was check replaced or the cell rewritten?)"), None


def judge(part: Part, cases: list[tuple[Any, ...]], got: list[Any],
          source: str | None = None) -> tuple[str, str]:
    """Judge the student's raw results outside the sandbox, from data only.

    Each result is compared with the oracle on the same inputs (and checked against the inputs
    where the part says so); outputs the student's process only observed (counts, flags) are
    ignored. Parts that grade how a result was computed judge ``source``, the checked function's
    text found in the notebook (``source.find_source``), and fail without it.
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
    verdict = judge_source(part, source)
    if not verdict.ok:
        return "failed", f"the values are right, but {verdict.message}"
    return "passed", f"{len(cases)} fresh cases passed"


# --------------------------------------------------------------------------- the batch


def job_key(job: Job, settings: Settings) -> str:
    """What a grade depends on: the submission, its source, the part specs and the limits."""
    h = hashlib.sha256(GRADER_VERSION.encode())
    h.update(job.exercise.digest.encode())
    h.update(json.dumps(asdict(settings), sort_keys=True).encode())
    if job.path is not None:
        h.update(job.path.read_bytes())
    parts_dir = Path(__file__).resolve().parent / "parts"
    for module in sorted({p.split(".")[0] for p, _ in job.exercise.parts}):
        spec = parts_dir / f"{module}.py"
        h.update(spec.read_bytes() if spec.exists() else b"")
    return h.hexdigest()


def grade(submissions: Path, source: Path, out: Path, *, settings: Settings | None = None,
          jobs: int = 1, force: bool = False, progress: bool = True,
          log: Callable[[str], None] = print) -> Summary:
    """Grade every submission; write grades.csv, feedback/ and the nbgrader export into ``out``."""
    settings = settings or Settings()
    start = time.monotonic()
    exercises = load_source(source)
    all_jobs, extra = collect(submissions, exercises)
    out.mkdir(parents=True, exist_ok=True)
    problem = sandbox.bwrap_problem()
    if problem:
        log(f"WARNING: grading WITHOUT a sandbox: {problem}. Submissions run with resource "
            "limits only and can read and write what the grading user can; the gradebook "
            "says 'rlimits only'.")
    hide = _hidden_paths(source, out, submissions)
    state_dir = out / ".state"
    todo, rows_by_job = [], {}
    for job in all_jobs:
        key = job_key(job, settings)
        state = state_dir / safe_file_name(job.student) / f"{job.exercise.name}.json"
        previous = _load_state(state)
        if not force and previous.get("key") == key:
            rows_by_job[(job.student, job.exercise.name)] = [Row(**r) for r in previous["rows"]]
        else:
            todo.append((job, key, state))

    def work(item: tuple[Job, str, Path]) -> None:
        job, key, state = item
        rows = grade_one(job, out, settings, hide)
        rows_by_job[(job.student, job.exercise.name)] = rows
        write_atomic(state, json.dumps({"key": key, "rows": [asdict(r) for r in rows]},
                                       indent=1).encode())

    from tqdm import tqdm

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool, tqdm(
        total=len(todo), desc="grading", unit="submission", disable=not progress or not todo,
        file=sys.stderr,
    ) as bar:
        for _ in pool.map(work, todo):
            bar.update(1)
    rows = [r for job in all_jobs for r in rows_by_job[(job.student, job.exercise.name)]]
    rows += extra
    write_outputs(out, rows, all_jobs)
    summary = Summary(rows, len(todo), len(all_jobs) - len(todo), time.monotonic() - start,
                      not problem, problem)
    return summary


def _hidden_paths(*paths: Path) -> list[Path]:
    """What the sandbox must not see: the solutions, the grades, all other submissions."""
    found = []
    for path in paths:
        path = path.resolve()
        found.append(path if path.is_dir() else path.parent)
    return found


def _load_state(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
        return data if isinstance(data, dict) and "rows" in data else {}
    except (OSError, ValueError):
        return {}


def bench(submissions: int = 8, jobs: int = 2, out: Path | None = None,
          source: Path | None = None, timeout_s: float = 60.0) -> dict[str, float]:
    """Throughput: grade ``submissions`` copies of every solution notebook; submissions/minute."""
    import tempfile

    source = source or Path(__file__).resolve().parents[2] / "solutions"
    with tempfile.TemporaryDirectory(prefix="edu-dl-bench-", dir=out) as tmp:
        root = Path(tmp)
        for i in range(submissions):
            student = root / "submissions" / f"student{i:03d}"
            student.mkdir(parents=True)
            for nb in sorted(source.glob("*.ipynb")):
                shutil.copy(nb, student / nb.name)
        result = grade(root / "submissions", source, root / "grades", jobs=jobs,
                       settings=Settings(timeout_s=timeout_s), log=lambda s: None)
    n = result.graded
    return {"submissions": n, "jobs": jobs, "seconds": result.seconds,
            "per_minute": 60.0 * n / result.seconds if result.seconds else 0.0,
            "seconds_per_submission_per_job": result.seconds * jobs / max(1, n),
            "passed_fraction": sum(r.status == "passed" for r in result.rows)
            / max(1, len(result.rows))}


def cpu_count() -> int:
    return len(os.sched_getaffinity(0))
