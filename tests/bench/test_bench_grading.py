"""``tests/bench_grading.py`` (a development benchmark): throughput, and edu-dl beside nbgrader 0.9
on the same sample course."""

from __future__ import annotations

from pathlib import Path

import bench_grading as grading
import pytest

X = grading.TIMES


def test_the_table_says_whether_the_goal_is_met() -> None:
    seconds = {"nbgrader": [16.0, 20.0, 18.0], "edu-dl --jobs 1": [7.2, 8.0, 9.0],
               "edu-dl --jobs 2": [4.0, 4.4, 5.0]}
    result = {"notebooks": 8, "rounds": 3, "seconds": seconds,
              "per_notebook": {k: sorted(v)[1] / 8 for k, v in seconds.items()},
              "ratios": {k: sorted(a / b for a, b in zip(v, seconds["nbgrader"]))
                         for k, v in seconds.items() if k != "nbgrader"},
              "split": ["where the time went (8 notebook runs, ...): cells 1.0 s (50%)"]}
    text = grading.versus_nbgrader_markdown(result, cores=2)
    assert f"| edu-dl --jobs 1 | 1.00 s | 0.90 to 1.12 s | 0.45{X} (0.40 to 0.50) |" in text
    assert f"| nbgrader | 2.25 s | 2.00 to 2.50 s | 1.00{X} |" in text
    assert f"0.45{X} (rounds 0.40 to 0.50), met." in text
    assert "where the time went (8 notebook runs" in text
    seconds["edu-dl --jobs 1"][2] = 10.0  # one round over the goal
    result["ratios"]["edu-dl --jobs 1"] = sorted(
        a / b for a, b in zip(seconds["edu-dl --jobs 1"], seconds["nbgrader"]))
    assert "**not met in every round**" in grading.versus_nbgrader_markdown(result, cores=2)
    result["ratios"]["edu-dl --jobs 1"] = [0.6, 0.7, 0.8]
    assert "**not met**." in grading.versus_nbgrader_markdown(result, cores=2)


@pytest.mark.slow
def test_nbgrader_and_edu_dl_grade_the_same_notebooks(
        nbgrader_beside_edu_dl: tuple[dict, Path]) -> None:
    # One worker only: the goal is measured there, and grading with two is tested elsewhere.
    # The run is shared (conftest.py): test_nbgrader_course.py reads nbgrader's scores from it.
    result, _ = nbgrader_beside_edu_dl
    assert result["notebooks"] == 4 and result["rounds"] == 1
    assert set(result["seconds"]) == {"nbgrader", "edu-dl --jobs 1"}
    assert all(len(s) == 1 and s[0] > 0 for s in result["seconds"].values())
    assert result["split"] and result["split"][0].startswith("where the time went (4 notebook")
    assert "| edu-dl --jobs 1 |" in grading.versus_nbgrader_markdown(result, cores=2)


def test_the_dev_tool_parses_its_flags_and_reports_throughput(capsys, tmp_path: Path) -> None:
    args = grading.parser().parse_args(["--quick", "--jobs", "3"])
    assert args.quick and args.jobs == 3 and not args.nbgrader
    with pytest.raises(SystemExit):
        grading.parser().parse_args(["--jobs", "0"])
    text = grading.throughput_markdown({"submissions": 6, "jobs": 2, "seconds": 30.0,
                                        "per_minute": 12.0,
                                        "seconds_per_submission_per_job": 10.0,
                                        "passed_fraction": 0.5}, cores=2)
    assert "6 submissions, --jobs 2, 2 cores: 30.0 s, **12.0 submissions/minute**" in text
    assert "50 % of parts passed" in text


def test_the_validate_table_says_whether_the_targets_are_met() -> None:
    fast = {"notebook": "08_autograd_from_scratch", "wall": [6.0, 2.5, 2.9, 2.7],
            "took": [5.0, 1.5, 1.9, 1.7]}
    text = grading.validate_markdown(fast, cores=2)
    assert "| first | 6.0 s | 5.0 s |" in text
    assert "| warm (median, range) | 2.7 s (2.5 to 2.9) | 1.7 s (1.5 to 1.9) |" in text
    assert text.rstrip().endswith(": met.")
    slow = {**fast, "wall": [6.0, 5.2, 5.5, 5.4]}  # warm over 3 s
    assert "**not met**" in grading.validate_markdown(slow, cores=2)
    cold = {**fast, "wall": [9.0, 2.5, 2.9, 2.7]}  # the first run over 8 s
    assert "**not met**" in grading.validate_markdown(cold, cores=2)
    assert grading.parser().parse_args(["--validate", "--rounds", "2"]).validate
