"""``edu-dl bench grading``: grading throughput, in submissions per minute.

Grades N copies of every solution notebook with ``--jobs`` workers, each submission in a fresh
sandbox, kernel and comparison, exactly as ``edu-dl grade`` does; CPU only (the grader runs no
GPU code).
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path
from typing import Any

from .args import positive_int
from .common import add_flags, finish, usable_cores

SOLUTIONS = Path(__file__).resolve().parents[2] / "solutions"


def bench(submissions: int = 8, jobs: int = 2, out: Path | None = None,
          source: Path | None = None, timeout_s: float = 60.0,
          progress: bool = True) -> dict[str, float]:
    """Throughput: grade ``submissions`` copies of every solution notebook; submissions/minute."""
    from ..grading.grade import Settings, grade

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
    add_flags(p, files="grading.md", device=None, quick="2 submissions: checks that it runs")
    p.set_defaults(handler=run_bench_grading)


def run_bench_grading(args: argparse.Namespace) -> int:
    submissions = args.submissions or (2 if args.quick else 8)
    result = bench(submissions, args.jobs, source=args.source, progress=not args.no_progress)
    text = (f"# Grading throughput\n\n{int(result['submissions'])} submissions, --jobs "
            f"{args.jobs}, {usable_cores()} cores: {result['seconds']:.1f} s, "
            f"**{result['per_minute']:.1f} submissions/minute** "
            f"({result['seconds_per_submission_per_job']:.1f} s per submission per worker); "
            f"{100 * result['passed_fraction']:.0f} % of parts passed.\n")
    finish("grading", text, args.out)
    return 0
