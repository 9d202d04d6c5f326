"""``tests/bench_grading.py`` (a development benchmark): throughput, and edu-dl beside nbgrader 0.9
on the same sample course."""

from __future__ import annotations

from pathlib import Path

import bench_grading as grading
import pytest

X = grading.TIMES


def test_the_table_says_whether_the_goal_is_met() -> None:
    result = {"notebooks": 8, "seconds": {"nbgrader": 16.0, "edu-dl --jobs 1": 12.0,
                                          "edu-dl --jobs 2": 7.0}}
    result["per_notebook"] = {k: v / 8 for k, v in result["seconds"].items()}
    text = grading.versus_nbgrader_markdown(result, cores=2)
    assert f"| edu-dl --jobs 1 | 12.0 s | 1.50 s | 0.75{X} |" in text
    assert f"| nbgrader | 16.0 s | 2.00 s | 1.00{X} |" in text
    assert f"0.75{X}, met." in text
    result["per_notebook"]["edu-dl --jobs 1"] = 2.5
    assert f"1.25{X}, **not met**." in grading.versus_nbgrader_markdown(result, cores=2)


@pytest.mark.slow
def test_nbgrader_and_edu_dl_grade_the_same_notebooks(request: pytest.FixtureRequest) -> None:
    venv = Path(request.config.cache.mkdir("nbgrader-0.9-venv"))  # shared with the nbgrader tests
    result = grading.versus_nbgrader(copies=1, jobs=2, venv=venv, progress=False)
    assert result["notebooks"] == 4
    assert set(result["seconds"]) == {"nbgrader", "edu-dl --jobs 1", "edu-dl --jobs 2"}
    assert all(s > 0 for s in result["seconds"].values())


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
