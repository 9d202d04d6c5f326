"""Speed tasks graded from outside the student's code: CPU time the kernel accounts, per run.

The reference and the submission run in separate sandboxes (``edu_dl.grading.speed_driver``,
one process tree each), on inputs drawn from the grading secret. The grader reads each tree's
CPU time (user + system) from the kernel when it ends (``sandbox.Result.cpu_s``: the watchdog's
samples of the whole process tree every ``POLL_S``, each process's own time and what it reaped,
a detached process too, and wait4's rusage): no timer in the student's process is ever
consulted, so patching ``time`` or writing timing files changes nothing, and work handed to a
thread or a child process still counts. Libraries run one thread (the sandbox's environment), so
the ratio compares work, not cores.

**Cost per call, by differences.** Each kind (reference, submission) runs twice per round: a
*big* run that draws N inputs and calls the function on all N, and a *small* run that draws the
same N inputs and calls it on the first N / ``SMALL_SHARE``. Everything but the calls (the
interpreter, imports, drawing the inputs, the module's own import-time work) is the same in both
and cancels: per call = (big - small) / (the calls between them). No separate baseline is
subtracted (its own ~0.1 s of noise once was the whole of a fast submission's measured cost).
The reference's big run makes the task's ``calls`` (about a CPU second); the submission's makes
``SUBMISSION_SCALE`` times as many, so that a submission right at the credit line spends about
``SUBMISSION_SCALE`` x (1 - 1 / ``SMALL_SHARE``) / credit line of the reference's seconds between
its two runs, far above the noise of a run's fixed costs (a few hundredths of a second, a clock
tick is 0.01 s). Runs are interleaved round by round (rotated), the least CPU time of each run is
kept (a busy machine only ever adds time), for ``ROUNDS`` rounds; a submission clearly too slow
or clearly fast enough after the first round is not measured again (``CLEARLY_SLOW``,
``CLEARLY_FAST``): a second round moves a ratio by a few percent, not by half.

**Correct first.** Every submission run's outputs must match the reference's to the task's
tolerance, or the task scores 0: the calls the reference's big run made are compared one by one,
and ``SPOT_CHECKS`` of the submission's further calls, at indices drawn by the grader at random
after the fact, are compared with a reference run on exactly those inputs (a function that
answers wrongly from some call on is caught with near certainty).

**A band, not a cliff.** Credit needs ``CREDIT_FRACTION`` of the goal ratio (the credit line). A
measured ratio at least (1 + ``BAND``) x the line earns the points; one under (1 - ``BAND``) x
the line is "too slow"; one within ``BAND`` of the line is not decided by the machine: the row
"needs manual grading", with the measurement in its message, and a person decides (manual.csv).
``BAND`` is what a ratio may move between a quiet grader and a busy one, with room to spare
(the course's own solutions, quiet and beside two CPU hogs on two cores: standardize 12.0 to
14.3x, the SGD step 22.7 to 27.1x, a spread under 20 % of the least). Measured in pairs, as
validate does, the standardize solution read 10.7 to 14.9x quiet and 9.0 to 15.6x beside three
busy processes (2026-12-04): wider, from clock ticks more than from load, and still above the
band's ceiling of 7.5x.
"""

from __future__ import annotations

import argparse
import functools
import random
import sys
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from edu_dl.grading import sandbox, speed_driver
from edu_dl.grading.model import NEEDS as NEEDS_PERSON
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

CREDIT_FRACTION = 0.6  # of the goal ratio: the credit line
BAND = 0.25  # a ratio within this share of the credit line is left to a person
CLEARLY_SLOW = 0.5  # of the band's floor: below it after one round, no second round is run
CLEARLY_FAST = 1.5  # of the band's ceiling: at or above it after one round, none either
ROUNDS = 2  # best of two of each run
SMALL_SHARE = 4  # the small run makes 1 / SMALL_SHARE of the big run's calls
SUBMISSION_SCALE = 4  # the submission's big run makes this many times the reference's calls
SPOT_CHECKS = 8  # the submission's calls past the reference's, checked at random indices
FLOOR_FRACTION = 0.01  # a submission's cost per call is at least this much of the reference's
MIN_REFERENCE_S = 0.1  # below this the reference's measured difference is noise: the run says so
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
    # the gradebook's status: "passed", "too slow", NEEDS_PERSON (within the band), "failed" (a
    # wrong answer), "crashed", "timeout", "memory", "processes", "inconclusive", "refused",
    # "no result"
    status: str = "no result"
    ratio: float = 0.0  # the reference's CPU time per call / the submission's (0: not measured)
    # CPU seconds of each run, by kind and size ("reference", "reference small", ...)
    runs: dict[str, list[float]] = field(default_factory=dict)
    calls: dict[str, int] = field(default_factory=dict)  # calls each kind of run made
    seconds: float = 0.0  # wall time the measurement took, all runs together
    source: str = ""  # the function measured

    @property
    def needed(self) -> float:
        return CREDIT_FRACTION * self.goal

    @property
    def passed(self) -> bool:
        return self.correct and self.status == "passed"

    @property
    def reference_s(self) -> list[float]:
        return self.runs.get("reference", [])

    @property
    def submission_s(self) -> list[float]:
        return self.runs.get("submission", [])


def verdict(ratio: float, needed: float) -> str:
    """The status a measured ratio earns against the credit line ``needed``: "passed" at or
    above (1 + BAND) x the line, "too slow" under (1 - BAND) x, else NEEDS_PERSON."""
    if ratio >= needed * (1 + BAND):
        return "passed"
    if ratio < needed * (1 - BAND):
        return "too slow"
    return NEEDS_PERSON


def per_call(runs: dict[str, list[float]], calls: dict[str, int], kind: str) -> float:
    """CPU seconds per call of ``kind``: its big run's least time less its small run's, over the
    calls between them (everything else both runs did cancels)."""
    return ((min(runs[kind]) - min(runs[f"{kind} small"]))
            / (calls[kind] - calls[f"{kind} small"]))


def judged(found: Measurement, rounds: int) -> Measurement:
    """Fill in ``found``'s ratio, status and message from its runs (all made, all correct)."""
    reference = per_call(found.runs, found.calls, "reference")
    between = reference * (found.calls["reference"] - found.calls["reference small"])
    if between < MIN_REFERENCE_S:
        found.status = "inconclusive"
        found.message = (f"inconclusive: the reference's calls cost only {between:.3f} s of CPU "
                         "between its two runs; run it with more calls")
        return found
    submission = per_call(found.runs, found.calls, "submission")
    found.ratio = reference / max(submission, FLOOR_FRACTION * reference)
    found.status = verdict(found.ratio, found.needed)
    shown = (f"{found.ratio:.1f}x less CPU time per call than the reference (reference "
             f"{reference * 1e3:.3f} ms, this function {max(submission, 0.0) * 1e3:.3f} ms per "
             f"call, best of {rounds})")
    line = f"the {found.needed:.1f}x that earns credit (goal {found.goal:g}x)"
    if found.status == "passed":
        found.message = f"{shown}; reaches {line}"
    elif found.status == "too slow":
        found.message = f"{shown}; falls short of {line}"
    else:
        found.message = (f"{shown}: within {BAND:.0%} of {line}, too close for the measurement "
                         "to decide: a person grades it")
    return found


def seed_for(secret: Secret, part_id: str) -> int:
    """Inputs the student never saw: the grading secret's seed for this part."""
    return secret.seed(part_id.split(".")[0], part_id)


def module_text(function_source: str) -> bytes:
    """The submission's module: the imports a task allows, then the student's function."""
    return (PRELUDE + function_source + "\n").encode()


@dataclass(frozen=True)
class _Run:
    """One sandboxed run to make: its kind, calls made, inputs drawn, indices called."""

    kind: str
    calls: int
    inputs: int
    only: tuple[int, ...] = ()


def measure(part_id: str, function_source: str, seed: int, *, rounds: int = ROUNDS,
            calls: int | None = None, hide: Iterable[Path] = (),
            limits: sandbox.Limits = LIMITS, settings: Settings | None = None,
            pairs: bool = False) -> Measurement:
    """Time the submitted function against the task's reference, from outside (module doc).

    ``calls``: the reference's big run's (default: the task's). ``settings``: the run's, whose
    answer says whether the sandbox works (default: asked now; NoSandbox where it does not).
    ``pairs``: a round's runs two at a time (``edu-dl validate`` on a machine of two cores or
    more: half the wall time; each run's CPU time is its own either way), else one by one."""
    boxed = (settings or Settings()).checked().boxed
    task = TASKS[part_id]
    big = calls or task.calls
    many = SUBMISSION_SCALE * big
    found = Measurement(part_id, task.goal, source=function_source)
    found.calls = {"reference": big, "reference small": max(1, big // SMALL_SHARE),
                   "submission": many, "submission small": max(1, many // SMALL_SHARE)}
    began = time.perf_counter()
    plan = [_Run("reference small", found.calls["reference small"], big),
            _Run("reference", big, big),
            _Run("submission small", found.calls["submission small"], many),
            _Run("submission", many, many)]
    picked = random.SystemRandom()  # never seen by any sandbox
    spot = tuple(sorted(picked.sample(range(big, many), min(SPOT_CHECKS, many - big))))
    spot_run = _Run("reference", len(spot), many, spot)
    expected: np.ndarray | None = None
    spot_expected: np.ndarray | None = None

    def one(run: _Run) -> _Outcome:
        return _timed_outcome(task, run, function_source, seed, hide, limits, boxed)

    # Leaving the pool cancels the runs not started yet and waits for those running (in the
    # measurement's seconds): no sandbox outlives the measurement.
    try:
        with _Rounds(one, pairs) as rounds_:
            for round_ in range(rounds):
                order = plan[round_ % 4:] + plan[:round_ % 4]  # rotated each round
                # the spot check's reference run, once: beside the first round's runs
                outcomes = rounds_.start(order + ([spot_run] if spot and round_ == 0 else []))
                for run, outcome in zip(order, outcomes):
                    outputs = _recorded(found, run, outcome())
                    if outputs is None:
                        return found
                    if run.kind == "reference":
                        expected = outputs
                    elif run.kind.startswith("submission"):
                        assert expected is not None  # round 0 runs the reference's first
                        if spot and spot_expected is None and run.kind == "submission":
                            spot_expected = _recorded(found, spot_run, outcomes[-1](),
                                                      keep=False)
                            if spot_expected is None:
                                return found
                        if not _matches(task, outputs, expected, spot, spot_expected):
                            found.correct, found.status = False, "failed"
                            found.message = ("its answers differ from the reference's: a "
                                             "fast wrong answer scores 0")
                            return found
                found.correct = True
                judged(found, round_ + 1)
                if found.status not in ("passed", "too slow", NEEDS_PERSON) or \
                        found.ratio < found.needed * (1 - BAND) * CLEARLY_SLOW or \
                        found.ratio >= found.needed * (1 + BAND) * CLEARLY_FAST:
                    return found
            return found
    finally:
        found.seconds = time.perf_counter() - began


# One run's result: (CPU seconds the kernel accounted, the outputs, "" or what went wrong, its
# status).
_Outcome = tuple[float, np.ndarray, str, str]


class _Rounds:
    """Starts a round's runs. One by one, each when its outcome is asked for (a run that fails
    ends the measurement before the next starts); or, with ``pairs``, all at once on two
    threads (those making the most calls first), so that two run side by side, their outcomes
    then read in the round's order (the verdict is the same; a failing run's neighbour,
    already started, is waited for: a wrong submission's answer can come later, never a right
    one's)."""

    def __init__(self, one: Callable[[_Run], _Outcome], pairs: bool) -> None:
        self.one = one
        self.pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="speed-pair") \
            if pairs else None

    def start(self, runs: list[_Run]) -> list[Callable[[], _Outcome]]:
        if self.pool is None:
            return [functools.partial(self.one, run) for run in runs]
        # The runs that make the most calls start first, so that the last to end is a short
        # one: exercise 08's validate, 8 runs of each order interleaved in one process, took
        # 2.65 s (median) against 2.80 s in round order. (Before the spot check drew only its
        # own inputs, 0.16 s of CPU against 0.78, this order measured slower: 3.33 s to 3.02.)
        started = {i: self.pool.submit(self.one, runs[i])
                   for i in sorted(range(len(runs)), key=lambda i: -runs[i].calls)}
        return [started[i].result for i in range(len(runs))]

    def __enter__(self) -> _Rounds:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)


def _recorded(found: Measurement, run: _Run, outcome: _Outcome, keep: bool = True
              ) -> np.ndarray | None:
    """A run's outputs, its CPU time recorded in ``found`` (``keep``); None, with ``found``
    saying why, when the run went wrong."""
    cpu, outputs, problem, status = outcome
    if problem:
        kind = run.kind.split()[0]
        found.correct, found.message, found.status = False, f"{kind} run: {problem}", status
        return None
    if keep:
        found.runs.setdefault(run.kind, []).append(cpu)
    return outputs


def _matches(task: SpeedTask, outputs: np.ndarray, expected: np.ndarray, spot: tuple[int, ...],
             spot_expected: np.ndarray | None) -> bool:
    """Whether a submission run's outputs match the reference's: the calls both made, and the
    spot-checked ones past those (a big run's)."""
    both = min(len(outputs), len(expected))
    if not np.allclose(outputs[:both], expected[:both], rtol=task.rtol, atol=task.atol):
        return False
    if len(outputs) <= len(expected) or spot_expected is None:
        return True
    return bool(np.allclose(outputs[list(spot)], spot_expected, rtol=task.rtol, atol=task.atol))


def _timed_outcome(task: SpeedTask, run: _Run, function_source: str, seed: int,
                   hide: Iterable[Path], limits: sandbox.Limits, boxed: bool) -> _Outcome:
    """One run, as :func:`_timed_run` gives it, for outputs of the run's shape."""
    shape = (run.calls, *task.output_shape(*call_inputs(task, seed, 1)[0]))
    return _timed_run(task, run, function_source, seed, shape, hide, limits, boxed)


def _timed_run(task: SpeedTask, run: _Run, function_source: str, seed: int,
               shape: tuple[int, ...], hide: Iterable[Path], limits: sandbox.Limits,
               boxed: bool) -> tuple[float, np.ndarray, str, str]:
    """(CPU seconds the kernel accounted, the outputs, "" or what went wrong, and its status)
    of one run (without bwrap: in a fresh private folder, as another uid)."""
    if boxed:
        return _timed_run_in(task, run, function_source, seed, shape, hide, limits, None)
    with sandbox.fallback_folder() as fallback:
        return _timed_run_in(task, run, function_source, seed, shape, hide, limits, fallback)


def _timed_run_in(task: SpeedTask, run: _Run, function_source: str, seed: int,
                  shape: tuple[int, ...], hide: Iterable[Path], limits: sandbox.Limits,
                  fallback: Path | None) -> tuple[float, np.ndarray, str, str]:
    inside = INSIDE if fallback is None else str(fallback)
    kind = run.kind.split()[0]
    # As a file, not "-m": the driver then needs nothing of the package (speed_driver.py)
    argv = [sandbox.python(), "-P", str(Path(speed_driver.__file__)), task.part_id, kind,
            str(seed), str(run.calls), "--inputs", str(run.inputs)]
    if run.only:
        argv += ["--only", ",".join(map(str, run.only))]
    files = {}
    if kind == "submission":  # the reference never sees the student's code
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
                      settings: Settings | None = None, pairs: bool = False) -> Measurement:
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
                   settings=settings, pairs=pairs)


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
    parser.add_argument("--calls", type=int, help="calls of the reference's big run (default: "
                        "the task's)")
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
    for kind in ("reference small", "reference", "submission small", "submission"):
        times = found.runs.get(kind, [])
        say(f"  {kind:16s} {found.calls.get(kind, 0):5d} calls, CPU s: "
            f"{' '.join(f'{t:.3f}' for t in times) or '-'}")
    say(f"  measured in {found.seconds:.1f} s")
    return 0 if found.passed else 1


if __name__ == "__main__":
    sys.exit(main())
