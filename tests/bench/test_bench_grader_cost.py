"""``tests/bench_grader_cost.py`` (a development benchmark): the grader's own cost on the issue's
four costly notebooks; its table says which runs met their budget."""

from __future__ import annotations

import bench_grader_cost as bench


def run(wall: float, peak: float, cases: dict[str, float]) -> dict[str, object]:
    return {"wall_s": wall, "process_peak_mb": peak, "jobs": 1, "cases": {
        case: {"bytes": 2**20, "status": "refused", "grader_s": s, "grader_cpu_s": s,
               "grader_peak_mb": peak, "grader_added_mb": 5.0, "page_s": 0.0}
        for case, s in cases.items()}}


def test_the_table_says_which_runs_met_their_budget() -> None:
    alone = {"0,": run(12.0, 250.0, {"0,": 0.5}), "nested []": run(75.0, 250.0,
                                                                    {"nested []": 0.4})}
    together = run(30.0, 1100.0, {"0,": 0.5, "nested []": 0.25})
    text = bench.markdown(alone, together, cores=2, load=(1.0, 2.0, 3.0))
    assert "load average before the runs 1.0 / 2.0 / 3.0" in text
    assert "| 0, | 1.0 MB | refused | 12.0 | 0.50 | 0.50 | 250 (5) | 0.00 | 250 | yes |" in text
    assert "| nested [] | 1.0 MB | refused | 75.0 |" in text and "| 250 | **no** |" in text
    assert f"| {bench.TOGETHER} | | | 30.0 | 0.75 (sum) | 0.75 (sum) | 1100 (most) | | 1100 " \
        "| **no** |" in text


def test_the_dev_tool_builds_the_issues_cases_at_full_size() -> None:
    assert list(bench.costly.FULL) == ["nested []", "0,", "10,000 Markdown cells",
                                       "10,000 pass cells"]
    assert bench.CASES[0] == bench.HONEST
    assert bench.parser().parse_args(["--jobs", "2"]).jobs == 2
