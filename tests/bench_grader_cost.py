"""Development benchmark: what the grader itself spends on a costly submission (issue 35, item 5).

    .venv/bin/python tests/bench_grader_cost.py [--out benchmarks/GRADER_COST.md]

Builds the issue's four cases at full size (``fixtures/hostile/costly.py``: 15.9 MB of nested
``[]`` in the notebook's metadata, 15.9 MB of ``0,``, 10,000 Markdown cells of 15 MB, 10,000
``pass`` cells) and the honest solved notebook, and grades each alone with ``--jobs 1``, then
the four together with ``--jobs 2``, each run in a fresh process of its own (so that its resident
peak is its own). Reported per run: the wall time of the whole ``grade`` (sandbox included),
the grader's own seconds, CPU seconds and resident memory per submission (``grading.cost``, its
feedback page included) and the grading process's resident peak (``ru_maxrss``). Targets: each
case at most 60 s wall and 300 MB, the four at once under 1 GB. A tool for the grader's
developers, like ``bench_grading.py``; it prints the table and asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from fixtures.hostile import corpus, costly

from edu_dl.grading.cost import process_peak_mb
from edu_dl.grading.settings import Settings
from edu_dl.grading.term.batch import grade
from edu_dl.machine.hardware import usable_cores

HONEST = "honest (solved)"
CASES = [HONEST, *costly.FULL]
TOGETHER = "the four at once, --jobs 2"
SETTINGS = Settings(timeout_s=60, budget_s=300, memory_mb=2048)
WALL_TARGET_S, MEMORY_TARGET_MB, TOGETHER_TARGET_MB = 60.0, 300.0, 1024.0


def student_name(case: str) -> str:
    return "s" + "".join(c for c in case if c.isalnum())[:20]


def build(root: Path, cases: list[str]) -> dict[str, int]:
    """The source and one student per case below ``root``; each notebook's size."""
    corpus.write_source(root / "source", corpus.source())
    sizes = {}
    for case in cases:
        data = (costly.FULL[case]() if case in costly.FULL
                else costly.nbformat.writes(corpus.student()).encode())
        folder = root / "submissions" / student_name(case)
        folder.mkdir(parents=True)
        (folder / f"{corpus.EXERCISE}.ipynb").write_bytes(data)
        sizes[case] = len(data)
    return sizes


def measure(root: Path, cases: list[str], jobs: int) -> dict[str, Any]:
    """Grade what :func:`build` wrote (one student per case) in this process; what it cost."""
    start = time.perf_counter()
    summary = grade(root / "submissions", root / "source", root / "grades",
                    settings=SETTINGS, jobs=jobs, progress=False, log=lambda s: None)
    wall = time.perf_counter() - start
    found = {}
    for case in cases:
        key = (student_name(case), corpus.EXERCISE)
        spent, page = summary.costs[key]
        total = spent.plus(page) if page is not None else spent
        statuses = sorted({r.status for r in summary.rows if r.student == key[0]})
        found[case] = {"status": "/".join(statuses),
                       "grader_s": total.seconds, "grader_cpu_s": total.cpu_seconds,
                       "grader_peak_mb": total.peak_mb, "grader_added_mb": total.added_mb,
                       "page_s": page.seconds if page is not None else 0.0}
    return {"wall_s": wall, "process_peak_mb": process_peak_mb(), "cases": found,
            "jobs": jobs}


def in_a_fresh_process(cases: list[str], jobs: int) -> dict[str, Any]:
    """The cases built here, graded by :func:`measure` in a new Python: its resident peak is
    the grading's alone (building a case costs more than grading it now)."""
    with tempfile.TemporaryDirectory(prefix="edu-dl-bench-cost-") as tmp:
        sizes = build(Path(tmp), cases)
        done = subprocess.run([sys.executable, __file__, "--measure", json.dumps(cases),
                               "--root", tmp, "--jobs", str(jobs)], capture_output=True,
                              text=True, check=True, env={**os.environ, "TQDM_DISABLE": "1"},
                              cwd=Path(__file__).parent)
    found = dict(json.loads(done.stdout.strip().splitlines()[-1]))
    for case, size in sizes.items():
        found["cases"][case]["bytes"] = size
    return found


def markdown(alone: dict[str, dict[str, Any]], together: dict[str, Any], cores: int,
             load: tuple[float, float, float]) -> str:
    """The table: one row per case graded alone, one for the four at once."""
    lines = [f"Grader cost per submission, {cores} cores, load average before the runs "
             f"{load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} (1 / 5 / 15 min). Targets: "
             f"{WALL_TARGET_S:g} s wall and {MEMORY_TARGET_MB:g} MB each, "
             f"{TOGETHER_TARGET_MB:g} MB for the four at once.", "",
             "| case | size | status | wall s (whole grade) | grader s | grader CPU s | "
             "resident MB while graded (added) | page s | process peak MB (ru_maxrss) | met |",
             "|---|---:|---|---:|---:|---:|---:|---:|---:|---|"]
    for case, run in alone.items():
        c = run["cases"][case]
        met = run["wall_s"] <= WALL_TARGET_S and run["process_peak_mb"] <= MEMORY_TARGET_MB
        lines.append(f"| {case} | {c['bytes'] / 2**20:.1f} MB | {c['status']} | "
                     f"{run['wall_s']:.1f} | {c['grader_s']:.2f} | {c['grader_cpu_s']:.2f} | "
                     f"{c['grader_peak_mb']:.0f} ({c['grader_added_mb']:.0f}) | "
                     f"{c['page_s']:.2f} | "
                     f"{run['process_peak_mb']:.0f} | {'yes' if met else '**no**'} |")
    worst = max(c["grader_peak_mb"] for c in together["cases"].values())
    met = together["process_peak_mb"] <= TOGETHER_TARGET_MB
    lines.append(f"| {TOGETHER} | | | {together['wall_s']:.1f} | "
                 f"{sum(c['grader_s'] for c in together['cases'].values()):.2f} (sum) | "
                 f"{sum(c['grader_cpu_s'] for c in together['cases'].values()):.2f} (sum) | "
                 f"{worst:.0f} (most) | | {together['process_peak_mb']:.0f} | "
                 f"{'yes' if met else '**no**'} |")
    return "\n".join(lines) + "\n"


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, help="also write the table to this Markdown file")
    p.add_argument("--measure", help=argparse.SUPPRESS)  # the child's cases, as JSON
    p.add_argument("--jobs", type=int, default=1, help=argparse.SUPPRESS)
    p.add_argument("--root", type=Path, help=argparse.SUPPRESS)  # where build() wrote them
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.measure:  # the child: one run, its facts as the last line
        print(json.dumps(measure(args.root, json.loads(args.measure), args.jobs)))
        return 0
    load = os.getloadavg()
    alone = {case: in_a_fresh_process([case], 1) for case in CASES}
    together = in_a_fresh_process(list(costly.FULL), 2)
    text = markdown(alone, together, usable_cores().value, load)
    print(text)
    if args.out:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
