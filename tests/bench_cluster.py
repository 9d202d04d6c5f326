"""Development benchmark: grading throughput on a local Dask cluster of 1, 2, 3 ... one-thread
workers, against the local grader, and the cluster's overhead per submission (issue 24's tool).

    .venv/bin/python tests/bench_cluster.py [--submissions N] [--workers 1,2,3] [--jobs 1]
        [--exercise NAME ...] [--out FILE]

Needs the ``cluster`` extra (Dask). The same submissions (copies of the solution notebooks) are
graded once per configuration, with ``--force``, after an untimed warm-up batch; each cluster is
fresh and warmed up (imports and the sandbox probe done on every worker first). Overhead per
submission: the time from submitting a task to having its result on the client, less the time
the worker's watchdog spent on the sandbox: scheduling, moving the task and its result, the
worker's own setup. The client prepares the next task and judges the last one while a worker
runs. A tool for the grader's developers, not part of the course's ``edu-dl bench``.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from edu_dl.grading.settings import Settings
from edu_dl.grading.stages.cluster import ClusterOptions, local_cluster, warm_up
from edu_dl.grading.term.batch import grade
from edu_dl.machine.hardware import usable_cores


def bench(submissions: int = 4, workers: Sequence[int] = (1, 2, 3), jobs: Sequence[int] = (1,),
          source: Path | None = None, exercises: Sequence[str] = (),
          timeout_s: float = 120.0) -> list[dict[str, Any]]:
    """One row per configuration: local --jobs J, then a local cluster of W workers."""
    source = source or Path(__file__).resolve().parents[1] / "solutions"
    notebooks = [nb for nb in sorted(source.glob("*.ipynb"))
                 if not exercises or nb.stem in exercises]
    settings = Settings(timeout_s=timeout_s)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="edu-dl-bench-cluster-") as tmp:
        root = Path(tmp)
        for i in range(submissions):
            student = root / "submissions" / f"student{i:03d}"
            student.mkdir(parents=True)
            for nb in notebooks:
                shutil.copy(nb, student / nb.name)

        def timed(label: str, workers_used: int, **kw: Any) -> dict[str, Any]:
            start = time.perf_counter()
            summary = grade(root / "submissions", source, root / "grades", settings=settings,
                            force=True, progress=False, log=lambda s: None, **kw)
            wall = time.perf_counter() - start
            row = {"setup": label, "workers": workers_used, "submissions": summary.graded,
                   "seconds": wall, "per_minute": 60 * summary.graded / wall,
                   "passed": sum(r.status == "passed" for r in summary.rows)
                   / max(1, len(summary.rows))}
            print(f"{label}: {summary.graded} in {wall:.1f} s", file=sys.stderr)
            return row

        # Untimed: the first batch reads every library from disk into the page cache.
        grade(root / "submissions", source, root / "warm-up", settings=settings,
              progress=False, log=lambda s: None, exercises_due=[notebooks[0].stem])
        for j in jobs:
            rows.append(timed(f"local --jobs {j}", j, jobs=j))
        for n in workers:
            with local_cluster(n) as client:
                client.run(warm_up)
                timings: list[tuple[float, float]] = []
                row = timed(f"Dask, {n} worker{'s' * (n > 1)}", n,
                            cluster=ClusterOptions(client=client, timings=timings))
                overhead = [latency - inside for latency, inside in timings]
                row["overhead_ms"] = 1000 * statistics.median(overhead) if overhead else 0.0
                row["overhead_max_ms"] = 1000 * max(overhead, default=0.0)
                row["sandbox_s"] = statistics.mean(inside for _, inside in timings) \
                    if timings else 0.0
                rows.append(row)
    base = rows[0]["per_minute"] if rows else 0.0
    for row in rows:
        row["speedup"] = row["per_minute"] / base if base else 0.0
    return rows


def report(rows: list[dict[str, Any]], cores: int) -> str:
    """The rows as a Markdown table."""
    lines = [f"# Grading on a Dask cluster ({cores} cores)\n",
             "| setup | submissions | seconds | submissions/min | vs first row | sandbox s "
             "(mean) | overhead per submission (median / max) |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        overhead = (f"{r['overhead_ms']:.0f} ms / {r['overhead_max_ms']:.0f} ms"
                    if "overhead_ms" in r else "-")
        sandbox_s = f"{r['sandbox_s']:.1f}" if "sandbox_s" in r else "-"
        lines.append(f"| {r['setup']} | {r['submissions']} | {r['seconds']:.1f} | "
                     f"{r['per_minute']:.1f} | {r['speedup']:.2f}x | {sandbox_s} | {overhead} |")
    return "\n".join(lines) + "\n"


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="tests/bench_cluster.py",
        description="Grade N copies of the solution notebooks locally and on local Dask "
        "clusters of each worker count (one thread per worker); report submissions per minute "
        "and the cluster's overhead per submission (submit to result, less the sandbox).")
    p.add_argument("--submissions", type=int, default=4, help="students (copies) per run")
    p.add_argument("--workers", default="1,2,3", help="worker counts, comma-separated")
    p.add_argument("--jobs", default="1", help="local --jobs to compare, comma-separated")
    p.add_argument("--exercise", action="append", default=[], metavar="NAME",
                   help="only this solution notebook (repeat for more; default: all)")
    p.add_argument("--source", type=Path, default=None, help="default: the repo's solutions/")
    p.add_argument("--out", type=Path, metavar="FILE", help="also write the report here")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    rows = bench(args.submissions, [int(w) for w in args.workers.split(",")],
                 [int(j) for j in args.jobs.split(",")], args.source, args.exercise)
    text = report(rows, usable_cores().value)
    sys.stdout.write(text)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
