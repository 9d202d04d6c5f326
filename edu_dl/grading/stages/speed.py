"""Speed tasks graded from outside the student's code: CPU time the kernel accounts, per run.

The reference and the submission run in separate sandboxes (``edu_dl.grading.speed_driver``,
one process tree each), on the same inputs drawn from the grading secret, the same number of
calls. The grader reads each tree's CPU time (user + system) from the kernel when it ends
(``sandbox.Result.cpu_s``: the watchdog's samples of the whole process tree every
``POLL_S``, each process's own time and what it reaped, a detached process too, and wait4's
rusage): no timer in the
student's process is ever consulted, so patching ``time`` or writing timing files changes
nothing, and work handed to a thread or a child process still counts. Libraries run one thread
(the sandbox's environment), so the ratio compares work, not cores.

Robust to a loaded grader: CPU time, not wall time, is measured; runs are interleaved round by
round (baseline, reference, submission, rotated), the best (least) of each kind is kept, the
baseline (the same driver with imports and inputs only: no student code) is subtracted from
both, and credit needs only ``CREDIT_FRACTION`` of the goal. Correctness comes first: every
submission run's outputs must match the reference's, or the task scores 0.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from edu_dl.grading import sandbox
from edu_dl.grading.model import Refused
from edu_dl.grading.notebooks import Notebook, NotebookError
from edu_dl.grading.settings import NoSandbox, Settings
from edu_dl.grading.stages.run import sandbox_env
from edu_dl.grading.stages.secret import VALIDATION_SECRET, Secret, read_secret
from edu_dl.grading.trust.bounded import read_bounded
from edu_dl.grading.trust.notebook import Untrusted, parse_notebook
from edu_dl.grading.trust.source import find_source
from edu_dl.grading.trust.speed import read_speed_outputs, source_problem
from edu_dl.grading.trust.text import say
from edu_dl.speed.tasks import TASKS, SpeedTask, call_inputs

CREDIT_FRACTION = 0.6  # of the goal ratio: what a loaded 2-core grader can still show
ROUNDS = 3  # best of three of each kind
FLOOR_FRACTION = 0.01  # a submission's net cost is at least this much of the reference's
MIN_REFERENCE_S = 0.1  # below this the reference's net cost is noise: the run says so
PRELUDE = "import math\n\nimport numpy as np\n\n\n"  # what a submitted function may use
INSIDE = "/tmp/speed"  # the submission's module file, inside the sandbox
MAX_NOTEBOOK_BYTES = 32 << 20
LIMITS = sandbox.Limits(wall_s=300.0, memory_mb=2048, cpu_s=300, processes=64)
# The watchdog samples the tree's CPU time this often: work in the last interval of a run can
# go unseen (bwrap's own rusage does not include its namespace), so it is kept short.
POLL_S = 0.02


@dataclass
class Measurement:
    """What the grader measured for one submission of one task."""

    part_id: str
    goal: float
    correct: bool = False
    message: str = ""
    # the gradebook's status: "passed", "too slow", "failed" (a wrong answer), "crashed",
    # "timeout", "memory", "processes", "inconclusive", "refused", "no result"
    status: str = "no result"
    ratio: float = 0.0  # the reference's net CPU time / the submission's (0: not measured)
    baseline_s: list[float] = field(default_factory=list)
    reference_s: list[float] = field(default_factory=list)
    submission_s: list[float] = field(default_factory=list)

    @property
    def needed(self) -> float:
        return CREDIT_FRACTION * self.goal

    @property
    def passed(self) -> bool:
        return self.correct and self.ratio >= self.needed


def seed_for(secret: Secret, part_id: str) -> int:
    """Inputs the student never saw: the grading secret's seed for this part."""
    return secret.seed(part_id.split(".")[0], part_id)


def module_text(function_source: str) -> bytes:
    """The submission's module: the imports a task allows, then the student's function."""
    return (PRELUDE + function_source + "\n").encode()


def measure(part_id: str, function_source: str, seed: int, *, rounds: int = ROUNDS,
            calls: int | None = None, hide: Iterable[Path] = (),
            limits: sandbox.Limits = LIMITS, settings: Settings | None = None) -> Measurement:
    """Time the submitted function against the task's reference, from outside (module doc).

    ``settings``: the run's, whose answer says whether the sandbox works (default: asked
    now; NoSandbox where it does not)."""
    boxed = (settings or Settings()).checked().boxed
    task = TASKS[part_id]
    calls = calls or task.calls
    found = Measurement(part_id, task.goal)
    shape = (calls, *task.output_shape(*call_inputs(task, seed, 1)[0]))
    kinds = ("baseline", "reference", "submission")
    expected: np.ndarray | None = None
    for round_ in range(rounds):
        for kind in kinds[round_ % 3:] + kinds[: round_ % 3]:  # interleaved: rotated
            cpu, outputs, problem, status = _timed_run(task, kind, function_source, seed, calls,
                                                       shape, hide, limits, boxed)
            if problem:
                found.correct, found.message = False, f"{kind} run: {problem}"
                found.status = status
                return found
            getattr(found, f"{kind}_s").append(cpu)
            if kind == "reference" and expected is None:
                expected = outputs
            elif kind == "submission":
                assert expected is not None  # round 0 runs the reference before it
                if not np.allclose(outputs, expected, rtol=task.rtol, atol=task.atol):
                    found.correct, found.status = False, "failed"
                    found.message = ("its answers differ from the reference's: a fast wrong "
                                     "answer scores 0")
                    return found
    found.correct = True
    reference = min(found.reference_s) - min(found.baseline_s)
    submission = min(found.submission_s) - min(found.baseline_s)
    if reference < MIN_REFERENCE_S:
        found.status = "inconclusive"
        found.message = (f"inconclusive: the reference cost only {reference:.3f} s of CPU "
                         "over the baseline; run it with more calls")
        return found
    found.ratio = reference / max(submission, FLOOR_FRACTION * reference)
    verdict = "reaches" if found.passed else "falls short of"
    found.status = "passed" if found.passed else "too slow"
    found.message = (f"{found.ratio:.1f}x less CPU time than the reference (best of {rounds}, "
                     f"baseline subtracted); {verdict} the {found.needed:.1f}x that earns "
                     f"credit (goal {task.goal:g}x)")
    return found


def _timed_run(task: SpeedTask, kind: str, function_source: str, seed: int, calls: int,
               shape: tuple[int, ...], hide: Iterable[Path], limits: sandbox.Limits,
               boxed: bool) -> tuple[float, np.ndarray, str, str]:
    """(CPU seconds the kernel accounted, the outputs, "" or what went wrong, and its status)
    of one run (without bwrap: in a fresh private folder, as another uid)."""
    if boxed:
        return _timed_run_in(task, kind, function_source, seed, calls, shape, hide, limits, None)
    with sandbox.fallback_folder() as fallback:
        return _timed_run_in(task, kind, function_source, seed, calls, shape, hide, limits,
                             fallback)


def _timed_run_in(task: SpeedTask, kind: str, function_source: str, seed: int, calls: int,
                  shape: tuple[int, ...], hide: Iterable[Path], limits: sandbox.Limits,
                  fallback: Path | None) -> tuple[float, np.ndarray, str, str]:
    inside = INSIDE if fallback is None else str(fallback)
    argv = [sandbox.python(), "-m", "edu_dl.grading.speed_driver", task.part_id, kind,
            str(seed), str(calls)]
    files = {}
    if kind == "submission":  # the baseline and the reference never see the student's code
        argv += ["--module", f"{inside}/submission.py"]
        files[f"{inside}/submission.py"] = module_text(function_source)
    out_bytes = int(np.prod(shape)) * 4 + 4096
    result = sandbox.run(argv, limits=limits, env=sandbox_env(), files=files, hide=hide,
                         cwd="/tmp" if fallback is None else str(fallback),
                         fallback_dir=fallback,
                         output_limit=out_bytes, poll_s=POLL_S)
    if result.killed or result.returncode != 0:
        why = result.killed or f"exit code {result.returncode}"
        return (result.cpu_s, np.zeros(0), f"it failed ({why}): {result.log[-500:]}",
                result.killed or "crashed")
    try:
        outputs = read_speed_outputs(result.output, result.output_size, shape, limit=out_bytes)
    except Untrusted as exc:
        return result.cpu_s, np.zeros(0), str(exc), "failed"
    return result.cpu_s, outputs, "", ""


def measure_notebook(notebook: Path, part_id: str, seed: int, *, rounds: int = ROUNDS,
                     calls: int | None = None, max_bytes: int = MAX_NOTEBOOK_BYTES
                     ) -> Measurement:
    """Measure the function a submitted notebook's test cell for ``part_id`` checks."""
    found = Measurement(part_id, TASKS[part_id].goal)
    try:
        nb = parse_notebook(read_bounded(notebook, max_bytes), notebook.name)
    except (Refused, NotebookError) as exc:
        found.message, found.status = str(exc), "refused"
        return found
    return measure_submitted(nb, part_id, seed, rounds=rounds, calls=calls)


def measure_submitted(nb: Notebook, part_id: str, seed: int, *, rounds: int = ROUNDS,
                      calls: int | None = None, hide: Iterable[Path] = (),
                      settings: Settings | None = None) -> Measurement:
    """Measure the function a (parsed, restored) notebook's test cell for ``part_id`` checks:
    its source alone, after the source check; nothing else the notebook did is run."""
    found = Measurement(part_id, TASKS[part_id].goal)
    source = find_source(nb, part_id)
    if source is None:
        found.message = (f"no module-level function checked by {part_id!r} was found (keep the "
                         "name the notebook gives it, defined with def)")
        return found
    problem = source_problem(source)
    if problem:
        found.message, found.status = problem, "refused"
        return found
    return measure(part_id, source, seed, rounds=rounds, calls=calls, hide=hide,
                   settings=settings)


def main(argv: list[str] | None = None) -> int:
    """The command line: measure one notebook's speed task against its reference (validate's
    public secret unless --secret) and print the CPU times; 0 with credit, 1 without, 2 when the
    sandbox cannot run."""
    parser = argparse.ArgumentParser(
        prog="python -m edu_dl.grading.stages.speed",
        description="Measure a notebook's speed task against its reference, from outside.")
    parser.add_argument("notebook", type=Path)
    parser.add_argument("--part", default="ex02.faster_standardize", choices=sorted(TASKS))
    parser.add_argument("--secret", type=Path, help="the grading secret (default: validate's "
                        "public one)")
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    parser.add_argument("--calls", type=int, help="calls per timed run (default: the task's)")
    args = parser.parse_args(argv)
    secret = read_secret(args.secret) if args.secret else VALIDATION_SECRET
    try:
        Settings().checked()  # fails closed, as edu-dl grade does
    except NoSandbox as exc:
        say(f"{parser.prog}: {exc}", sys.stderr)
        return 2
    found = measure_notebook(args.notebook, args.part, seed_for(secret, args.part),
                             rounds=args.rounds, calls=args.calls)
    say(f"{args.part}: {'passed' if found.passed else 'no credit'}: {found.message}")
    for kind in ("baseline", "reference", "submission"):
        times = getattr(found, f"{kind}_s")
        say(f"  {kind:10s} CPU s: {' '.join(f'{t:.3f}' for t in times) or '-'}")
    return 0 if found.passed else 1


if __name__ == "__main__":
    sys.exit(main())
