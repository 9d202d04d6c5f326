"""``edu-dl bench grading``: grading throughput, in submissions per minute.

Grades N copies of every solution notebook with ``--jobs`` workers, each submission in a fresh
sandbox, kernel and comparison, exactly as ``edu-dl grade`` does; CPU only (the grader runs no
GPU code). ``--nbgrader``: the nbgrader-style sample course graded by nbgrader 0.9's
``autograde`` (in a virtual environment of its own) and by edu-dl, side by side in one run.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from edu_dl.bench.common import TIMES, add_flags, finish, usable_cores
from edu_dl.util.args import positive_int

SOLUTIONS = Path(__file__).resolve().parents[2] / "solutions"


def bench(submissions: int = 8, jobs: int = 2, out: Path | None = None,
          source: Path | None = None, timeout_s: float = 60.0,
          progress: bool = True) -> dict[str, float]:
    """Throughput: grade ``submissions`` copies of every solution notebook; submissions/minute."""
    from edu_dl.grading.batch import grade
    from edu_dl.grading.settings import Settings

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


NBGRADER_VENV = Path.home() / ".cache" / "edu-dl" / "nbgrader-0.9-venv"


def versus_nbgrader(copies: int, jobs: int, venv: Path = NBGRADER_VENV,
                    progress: bool = True) -> dict[str, Any]:
    """Seconds per notebook on the nbgrader-style sample course (``copies`` x its 4 students):
    nbgrader's autograde (serial: it has no parallel mode), then edu-dl with one worker and with
    ``jobs``, each on a fresh copy of the course, in this one process."""
    from edu_dl.grading import nbgrader_course as course
    from edu_dl.grading.batch import grade
    from edu_dl.grading.settings import Settings

    bin_dir = course.nbgrader_venv(venv)
    seconds: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="edu-dl-bench-nbgrader-") as tmp:
        courses = {}
        for name in ("nbgrader", *(f"edu-dl --jobs {j}" for j in sorted({1, jobs}))):
            src, root = course.build(Path(tmp) / name.replace(" ", "_"))
            for k in range(1, copies):
                for student in course.STUDENTS:
                    shutil.copytree(root / "submitted" / student,
                                    root / "submitted" / f"{student}{k}")
            courses[name] = (src, root)
        src, root = courses["nbgrader"]
        seconds["nbgrader"] = course.autograde(bin_dir, root)
        for j in sorted({1, jobs}):
            src, root = courses[f"edu-dl --jobs {j}"]
            result = grade(root, src, root / "grades", jobs=j, settings=Settings(timeout_s=60),
                           progress=progress, log=lambda s: None)
            seconds[f"edu-dl --jobs {j}"] = result.seconds
    notebooks = copies * len(course.STUDENTS)
    return {"notebooks": notebooks, "seconds": seconds,
            "per_notebook": {k: v / notebooks for k, v in seconds.items()}}


def versus_nbgrader_markdown(result: dict[str, Any]) -> str:
    per = result["per_notebook"]
    rows = "\n".join(f"| {name} | {result['seconds'][name]:.1f} s | {per[name]:.2f} s | "
                     f"{per[name] / per['nbgrader']:.2f}{TIMES} |" for name in per)
    one = per["edu-dl --jobs 1"] / per["nbgrader"]
    met = "met" if one <= 1.0 else "**not met**"
    return (f"# Grading: edu-dl beside nbgrader 0.9\n\nThe nbgrader-style sample course "
            f"(assert cells, partial credit, a warning on stderr, manual answers, a task; "
            f"`edu_dl/grading/nbgrader_course.py`), {result['notebooks']} submitted notebooks, "
            f"{usable_cores()} cores. nbgrader's `autograde` grades one notebook at a time "
            "in one process; edu-dl starts a sandbox, a runner and a kernel per notebook.\n\n"
            f"| grader | all notebooks | per notebook | vs nbgrader |\n|---|---:|---:|---:|\n"
            f"{rows}\n\nGoal, edu-dl (sandbox included, one worker) no slower than nbgrader "
            f"per notebook: {one:.2f}{TIMES}, {met}.\n")


def add_bench_grading(kinds: Any) -> None:
    """Register ``edu-dl bench grading``: submissions per minute."""
    p = kinds.add_parser(
        "grading", help="grading throughput: submissions per minute",
        description="Grade N copies of every solution notebook with --jobs workers and report "
        "submissions per minute (each submission: a fresh sandbox, kernel and comparison).")
    p.add_argument("--submissions", type=positive_int, default=None,
                   help="copies of every solution notebook (default 8, with --quick 2)")
    p.add_argument("--jobs", type=positive_int, default=2)
    p.add_argument("--source", type=Path, default=None, help="default: the repo's solutions/")
    p.add_argument("--nbgrader", action="store_true",
                   help="time nbgrader 0.9's autograde beside edu-dl on the nbgrader-style "
                   "sample course (--submissions copies of its 4 students; nbgrader is "
                   "installed once into its own virtual environment, --nbgrader-venv)")
    p.add_argument("--nbgrader-venv", type=Path, default=NBGRADER_VENV, metavar="DIR",
                   help=f"where nbgrader's environment is (default {NBGRADER_VENV})")
    add_flags(p, files="grading.md", device=None, quick="2 submissions: checks that it runs")
    p.set_defaults(handler=run_bench_grading)


def run_bench_grading(args: argparse.Namespace) -> int:
    submissions = args.submissions or (2 if args.quick else 8)
    if args.nbgrader:
        from edu_dl.grading.nbgrader_course import NbgraderUnavailable

        try:
            result = versus_nbgrader(submissions, args.jobs, args.nbgrader_venv,
                                     progress=not args.no_progress)
        except NbgraderUnavailable as exc:
            print(f"edu-dl bench grading: {exc}", file=sys.stderr)
            return 1
        finish("grading", versus_nbgrader_markdown(result), args.out)
        return 0
    result = bench(submissions, args.jobs, source=args.source, progress=not args.no_progress)
    text = (f"# Grading throughput\n\n{int(result['submissions'])} submissions, --jobs "
            f"{args.jobs}, {usable_cores()} cores: {result['seconds']:.1f} s, "
            f"**{result['per_minute']:.1f} submissions/minute** "
            f"({result['seconds_per_submission_per_job']:.1f} s per submission per worker); "
            f"{100 * result['passed_fraction']:.0f} % of parts passed.\n")
    finish("grading", text, args.out)
    return 0
