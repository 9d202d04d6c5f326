"""The unit tests' cost by folder, from pytest's JUnit XML: .ci/cost_by_folder.py REPORT.xml

Seconds are summed over the tests of a folder (both xdist workers together, so the total is about
twice the wall time on 2 workers); collection and fixtures shared across tests are not in them.
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from collections import defaultdict


def folder(classname: str) -> str:
    """tests.grading.hostile.test_x.TestY -> tests/grading/hostile."""
    parts = [p for p in classname.split(".") if p]
    modules = [i for i, p in enumerate(parts) if p.startswith(("test_", "bench_"))]
    return "/".join(parts[: modules[0]] if modules else parts[:-1]) or "tests"


def main(path: str) -> None:
    seconds: dict[str, float] = defaultdict(float)
    counts: dict[str, int] = defaultdict(int)
    for case in ET.parse(path).getroot().iter("testcase"):
        name = folder(case.get("classname", ""))
        seconds[name] += float(case.get("time", "0") or 0)
        counts[name] += 1
    print("unit tests by folder (seconds summed over both workers):")
    for name in sorted(seconds, key=seconds.__getitem__, reverse=True):
        print(f"  {name:<28} {counts[name]:>5} tests {seconds[name]:>8.1f} s")
    print(f"  {'total':<28} {sum(counts.values()):>5} tests {sum(seconds.values()):>8.1f} s")


if __name__ == "__main__":
    main(sys.argv[1])
