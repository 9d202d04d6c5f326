"""Development benchmark: grading throughput, in submissions per minute (issue 22's tool).

    .venv/bin/python tests/bench_grading.py [--submissions N] [--jobs J] [--out DIR]
    .venv/bin/python tests/bench_grading.py --nbgrader [--submissions N] [--jobs J]
    .venv/bin/python tests/bench_grading.py --validate [--rounds N]

Grades N copies of every solution notebook with ``--jobs`` workers, each submission in a fresh
sandbox, kernel and comparison, exactly as ``edu-dl grade`` does; CPU only (the grader runs no
GPU code). ``--nbgrader``: the nbgrader-style sample course (``tests/nbgrader_course.py``) graded
by nbgrader 0.9's ``autograde`` (in a virtual environment of its own) and by edu-dl, side by side
in one run. ``--validate``: ``edu-dl validate`` on the autograd exercise's solution, a first run
and warm ones, against issue 41's targets. A tool for the grader's developers, not part of the
course's ``edu-dl bench``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from fixtures import nbgrader_course as course

from edu_dl.grading.settings import Settings
from edu_dl.grading.term.batch import grade
from edu_dl.grading.term.report import cost_lines
from edu_dl.machine.hardware import usable_cores

SOLUTIONS = Path(__file__).resolve().parents[1] / "solutions"
NBGRADER_VENV = Path.home() / ".cache" / "edu-dl" / "nbgrader-0.9-venv"
TIMES = "\u00d7"  # the multiplication sign of ratios
GOAL = 0.5  # edu-dl's whole grade, one worker, against nbgrader's autograde + feedback


def bench(submissions: int = 8, jobs: int = 2, out: Path | None = None,
          source: Path | None = None, timeout_s: float = 60.0,
          progress: bool = True) -> dict[str, float]:
    """Throughput: grade ``submissions`` copies of every solution notebook; submissions/minute."""
    source = source or SOLUTIONS
    with tempfile.TemporaryDirectory(prefix="edu-dl-bench-", dir=out) as tmp:
        root = Path(tmp)
        for i in range(submissions):
            student = root / "submissions" / f"student{i:03d}"
            student.mkdir(parents=True)
            for nb in sorted(source.glob("*.ipynb")):
                shutil.copy(nb, student / nb.name)
        result = grade(root / "submissions", source, root / "grades", jobs=jobs,
                       settings=Settings(timeout_s=timeout_s), progress=progress,
                       log=lambda s: None)
    n = result.graded
    return {"submissions": n, "jobs": jobs, "seconds": result.seconds,
            "per_minute": 60.0 * n / result.seconds if result.seconds else 0.0,
            "seconds_per_submission_per_job": result.seconds * jobs / max(1, n),
            "passed_fraction": sum(r.status == "passed" for r in result.rows)
            / max(1, len(result.rows))}


def versus_nbgrader(copies: int, jobs: int, venv: Path = NBGRADER_VENV,
                    progress: bool = True, rounds: int = 3, ahead: int = 1,
                    keep: Path | None = None) -> dict[str, Any]:
    """Seconds per notebook on the nbgrader-style sample course (``copies`` x its 4 students),
    ``rounds`` rounds, interleaved so that a load that comes and goes falls on both: in each, on
    fresh copies of the course, nbgrader 0.9's ``autograde`` plus ``generate_feedback`` (its
    ``generate_assignment`` first, not timed), then edu-dl's whole ``grade`` (feedback pages
    included) with one worker, then with ``jobs``. Each round's ratio compares the two graders in
    that round. Also: where edu-dl's one-worker time went (its batch summary's split), and the
    speed tasks' measuring time apart (the sample course has none). ``ahead``: edu-dl's grading
    ahead (sandboxes and kernels started while others run; 0 for none). ``keep``: a folder
    where each round's graded courses stay (``round<k>/<grader>/``), for a caller that reads
    them; by default they are deleted."""
    bin_dir = course.nbgrader_venv(venv)
    names = ["nbgrader", *(f"edu-dl --jobs {j}" for j in sorted({1, jobs}))]
    seconds: dict[str, list[float]] = {name: [] for name in names}
    split: list[str] = []
    for k_round in range(rounds):
        with contextlib.ExitStack() as stack:
            tmp = (keep / f"round{k_round}" if keep is not None else Path(stack.enter_context(
                tempfile.TemporaryDirectory(prefix="edu-dl-bench-nbgrader-"))))
            for name in names:
                src, root = course.build(tmp / name.replace(" ", "_"))
                for k in range(1, copies):
                    for student in course.STUDENTS:
                        shutil.copytree(root / "submitted" / student,
                                        root / "submitted" / f"{student}{k}")
                if name == "nbgrader":
                    spent = course.autograde(bin_dir, root)
                    spent += course.run_nbgrader(bin_dir, root, "generate_feedback",
                                                 course.ASSIGNMENT, "--force")
                else:
                    j = int(name.rsplit(" ", 1)[1])
                    began = time.perf_counter()
                    result = grade(root, src, root / "grades", jobs=j,
                                   settings=Settings(timeout_s=60), progress=progress,
                                   log=lambda s: None, ahead=ahead)
                    spent = time.perf_counter() - began
                    if j == 1:
                        split = [line for line in cost_lines(result)
                                 if line.startswith(("where the time went", "measuring"))]
                seconds[name].append(spent)
    notebooks = copies * len(course.STUDENTS)
    ratios = {name: sorted(a / b for a, b in zip(seconds[name], seconds["nbgrader"]))
              for name in names[1:]}
    return {"notebooks": notebooks, "rounds": rounds, "seconds": seconds,
            "per_notebook": {k: statistics.median(v) / notebooks for k, v in seconds.items()},
            "ratios": ratios, "split": split, "ahead": ahead}


def versus_nbgrader_markdown(result: dict[str, Any], cores: int) -> str:
    """The side-by-side table (median per notebook, the rounds' range, each round's ratio to
    nbgrader in that round) and whether one edu-dl worker met the goal of GOAL x nbgrader."""
    per, n = result["per_notebook"], result["notebooks"]
    rows = []
    for name, times in result["seconds"].items():
        ratio = result.get("ratios", {}).get(name)
        shown = (f"{statistics.median(ratio):.2f}{TIMES} ({ratio[0]:.2f} to {ratio[-1]:.2f})"
                 if ratio else f"1.00{TIMES}")
        rows.append(f"| {name} | {per[name]:.2f} s | {min(times) / n:.2f} to "
                    f"{max(times) / n:.2f} s | {shown} |")
    one = result["ratios"]["edu-dl --jobs 1"]
    met = "met" if one[-1] <= GOAL else ("**not met**" if one[0] > GOAL else
                                         "**not met in every round**")
    split = "".join(f"\n{line}" for line in result.get("split", []))
    return (f"# Grading: edu-dl beside nbgrader 0.9\n\nThe nbgrader-style sample course "
            f"(assert cells, partial credit, a warning on stderr, manual answers, a task; "
            f"`tests/fixtures/nbgrader_course.py`), {n} submitted notebooks, {cores} cores, "
            f"{result['rounds']} rounds, the graders taking turns in each. nbgrader: "
            "`autograde` then `generate_feedback`, one notebook at a time in one process; "
            "edu-dl: `grade` (a sandbox, a runner and a kernel per notebook, feedback pages "
            f"included; grading ahead: {result.get('ahead', 1)}).\n\n"
            f"| grader | per notebook (median) | rounds | vs nbgrader in the same round |\n"
            f"|---|---:|---:|---:|\n" + "\n".join(rows) +
            f"\n\nGoal, edu-dl with one worker at most {GOAL:g}{TIMES} nbgrader per notebook: "
            f"{statistics.median(one):.2f}{TIMES} (rounds {one[0]:.2f} to {one[-1]:.2f}), "
            f"{met}.\n" + (f"\nedu-dl, one worker, last round:{split}\n" if split else ""))


VALIDATED = "08_autograd_from_scratch"  # issue 41's "autograd exercise"
VALIDATE_WARM_S, VALIDATE_COLD_S = 3.0, 8.0  # its targets


def validate_times(runs: int = 5, notebook: str = VALIDATED) -> dict[str, Any]:
    """Wall seconds of ``edu-dl validate`` on the solution of ``notebook``, as a student runs it
    (a fresh process each time, the exercises' parts/ beside it): the first run, and the runs
    after it (warm: the interpreter's files in the page cache). Also how long validate itself
    said it took (its "took" line: without the interpreter's start and the imports)."""
    import re
    import subprocess

    edu_dl = Path(sys.executable).with_name("edu-dl")
    # As a student's shell runs it: Python writes the bytecode of what it imports (a developer's
    # PYTHONDONTWRITEBYTECODE=1 would have every run compile the package again, 0.2 s of CPU).
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    took: list[float] = []
    wall: list[float] = []
    with tempfile.TemporaryDirectory(prefix="edu-dl-bench-validate-") as tmp:
        shutil.copytree(SOLUTIONS.parent / "exercises" / "parts", Path(tmp) / "parts")
        shutil.copy(SOLUTIONS / f"{notebook}.ipynb", tmp)
        for _ in range(runs):
            began = time.perf_counter()
            done = subprocess.run([str(edu_dl), "validate", f"{notebook}.ipynb"], cwd=tmp,
                                  env=env, capture_output=True, text=True, timeout=600)
            wall.append(time.perf_counter() - began)
            said = re.search(r"^took ([\d.]+) s$", done.stdout, re.M)
            if done.returncode != 0 or said is None:
                raise RuntimeError(f"validate failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
            took.append(float(said.group(1)))
    return {"notebook": notebook, "wall": wall, "took": took}


def validate_markdown(result: dict[str, Any], cores: int) -> str:
    """The first run and the warm ones (median, range), against the targets."""
    wall, took = result["wall"], result["took"]
    warm, warm_took = sorted(wall[1:]), sorted(took[1:])
    verdict = "met" if wall[0] <= VALIDATE_COLD_S and statistics.median(warm) <= \
        VALIDATE_WARM_S else "**not met**"
    return (f"# `edu-dl validate` on {result['notebook']}\n\n{cores} cores, its solution with "
            f"the exercises' parts/ beside it, {len(wall)} runs in fresh processes.\n\n"
            "| run | wall | validate's own \"took\" |\n|---|---:|---:|\n"
            f"| first | {wall[0]:.1f} s | {took[0]:.1f} s |\n"
            f"| warm (median, range) | {statistics.median(warm):.1f} s ({warm[0]:.1f} to "
            f"{warm[-1]:.1f}) | {statistics.median(warm_took):.1f} s ({warm_took[0]:.1f} to "
            f"{warm_took[-1]:.1f}) |\n\nTargets: at most {VALIDATE_WARM_S:g} s warm and "
            f"{VALIDATE_COLD_S:g} s cold: {verdict}.\n")


def throughput_markdown(result: dict[str, float], cores: int) -> str:
    return (f"# Grading throughput\n\n{int(result['submissions'])} submissions, --jobs "
            f"{int(result['jobs'])}, {cores} cores: {result['seconds']:.1f} s, "
            f"**{result['per_minute']:.1f} submissions/minute** "
            f"({result['seconds_per_submission_per_job']:.1f} s per submission per worker); "
            f"{100 * result['passed_fraction']:.0f} % of parts passed.\n")


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="tests/bench_grading.py",
        description="Grade N copies of every solution notebook with --jobs workers and report "
        "submissions per minute (each submission: a fresh sandbox, kernel and comparison).")
    p.add_argument("--submissions", type=positive_int, default=None,
                   help="copies of every solution notebook (default 8, with --quick 2)")
    p.add_argument("--jobs", type=positive_int, default=2)
    p.add_argument("--source", type=Path, default=None, help="default: the repo's solutions/")
    p.add_argument("--nbgrader", action="store_true",
                   help="time nbgrader 0.9's autograde and feedback beside edu-dl on the "
                   "nbgrader-style sample course (--submissions copies of its 4 students; "
                   "nbgrader is installed once into its own virtual environment, "
                   "--nbgrader-venv)")
    p.add_argument("--nbgrader-venv", type=Path, default=NBGRADER_VENV, metavar="DIR",
                   help=f"where nbgrader's environment is (default {NBGRADER_VENV})")
    p.add_argument("--rounds", type=positive_int, default=3,
                   help="with --nbgrader: rounds, the graders taking turns in each; with "
                   "--validate: warm runs (default 3)")
    p.add_argument("--validate", action="store_true",
                   help=f"time edu-dl validate on {VALIDATED}'s solution instead (--rounds+1 "
                   "runs, the first apart)")
    p.add_argument("--ahead", type=int, default=1, choices=range(0, 9), metavar="N",
                   help="with --nbgrader: edu-dl's grading ahead, sandboxes started while others "
                   "run (default 1; 0: none)")
    p.add_argument("--quick", action="store_true", help="2 submissions: checks that it runs")
    p.add_argument("--out", type=Path, metavar="DIR", help="also write DIR/grading.md")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    submissions = args.submissions or (2 if args.quick else 8)
    cores = usable_cores().value
    if args.validate:
        text = validate_markdown(validate_times(args.rounds + 1), cores)
    elif args.nbgrader:
        try:
            text = versus_nbgrader_markdown(versus_nbgrader(
                submissions, args.jobs, args.nbgrader_venv, progress=not args.no_progress,
                rounds=args.rounds, ahead=args.ahead),
                cores)
        except course.NbgraderUnavailable as exc:
            print(f"bench_grading: {exc}", file=sys.stderr)
            return 1
    else:
        text = throughput_markdown(bench(submissions, args.jobs, source=args.source,
                                         progress=not args.no_progress), cores)
    sys.stdout.write(text)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "grading.md").write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
