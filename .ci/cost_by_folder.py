"""The unit tests' cost by folder, from pytest's JUnit XML: .ci/cost_by_folder.py REPORT.xml;
with --notebooks, the notebook phase's cost by notebook (nbval's items are its cells).

Seconds are summed over the tests of a folder (all xdist workers together, so the total is about
the wall time times the workers); collection and fixtures shared across tests are not in them.
Then each xdist worker's busy time (tests/conftest.py records the worker of every test): workers
far apart mean one waited idle while the other ran, and the phase took the longer of the two.
"""

from __future__ import annotations

import argparse
import xml.etree.ElementTree as ET
from collections import defaultdict


def folder(classname: str) -> str:
    """tests.grading.hostile.test_x.TestY -> tests/grading/hostile."""
    parts = [p for p in classname.split(".") if p]
    modules = [i for i, p in enumerate(parts) if p.startswith(("test_", "bench_"))]
    return "/".join(parts[: modules[0]] if modules else parts[:-1]) or "tests"


def by_notebook(path: str, top: int = 12) -> None:
    """The notebooks' cost, costliest first: the cells' seconds summed per notebook."""
    seconds: dict[str, float] = defaultdict(float)
    for case in ET.parse(path).getroot().iter("testcase"):
        name = case.get("classname", "")  # lectures.17_gpu_practice.ipynb
        folder_name, _, notebook = name.partition(".")
        seconds[f"{folder_name}/{notebook}"] += float(case.get("time", "0") or 0)
    ranked = sorted(seconds, key=seconds.__getitem__, reverse=True)
    print(f"notebooks by cost (their cells' seconds, both workers summed): {len(ranked)} "
          f"notebooks, {sum(seconds.values()):.0f} s; the {min(top, len(ranked))} costliest:")
    for name in ranked[:top]:
        print(f"  {name:<44} {seconds[name]:>7.1f} s")


def main(path: str) -> None:
    seconds: dict[str, float] = defaultdict(float)
    counts: dict[str, int] = defaultdict(int)
    busy: dict[str, float] = defaultdict(float)
    for case in ET.parse(path).getroot().iter("testcase"):
        name = folder(case.get("classname", ""))
        time = float(case.get("time", "0") or 0)
        seconds[name] += time
        counts[name] += 1
        workers = [p.get("value", "?") for p in case.iter("property") if p.get("name") == "worker"]
        busy[workers[0] if workers else "?"] += time
    print("unit tests by folder (seconds summed over the workers):")
    for name in sorted(seconds, key=seconds.__getitem__, reverse=True):
        print(f"  {name:<28} {counts[name]:>5} tests {seconds[name]:>8.1f} s")
    print(f"  {'total':<28} {sum(counts.values()):>5} tests {sum(seconds.values()):>8.1f} s")
    print("busy time per worker (balanced when they are close): "
          + ", ".join(f"{worker} {busy[worker]:.0f} s" for worker in sorted(busy)))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("report", help="pytest's JUnit XML")
    parser.add_argument("--notebooks", action="store_true", help="cost by notebook (nbval)")
    args = parser.parse_args()
    (by_notebook if args.notebooks else main)(args.report)
