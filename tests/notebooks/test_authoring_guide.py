"""The instructors' guide cannot rot: its field tables list every field an author sets, and its
worked example (a private exercise, from nothing to a graded batch) runs as written."""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from edu_dl.grading import sandbox
from edu_dl.grading.authoring import hints
from edu_dl.grading.authoring.spec import Accuracy, Part, Tolerance
from edu_dl.grading.term import solution_run

GUIDE = Path(__file__).resolve().parents[2] / "site" / "instructors.md"
FIELDS = "### Every field of a Part"
EXAMPLE = "### A worked example: a private exercise"
BLOCK = re.compile(r"^ *```(\w+)\n(.*?)^ *```$", re.S | re.M)


def _section(title: str) -> str:
    text = GUIDE.read_text()
    start = text.index(title)
    end = text.find("\n### ", start + len(title))
    return text[start:end if end >= 0 else None]


def _documented(section: str) -> set[str]:
    """The names in backticks that start a table row: `| `name` | ...`."""
    return set(re.findall(r"^\| `(\w+)` \|", section, re.M))


def _rules() -> list[type[hints.Rule]]:
    return [c for c in vars(hints).values() if isinstance(c, type)
            and issubclass(c, hints.Rule) and c is not hints.Rule]


def test_the_guide_lists_every_field_an_author_sets() -> None:
    section = _section(FIELDS)
    documented = _documented(section)
    for kind in (Part, Tolerance, Accuracy, hints.Mistake):
        missing = {f.name for f in dataclasses.fields(kind)} - documented
        assert not missing, f"{kind.__name__} fields missing from the guide: {missing}"
    base = {f.name for f in dataclasses.fields(hints.Rule)}
    assert all(f"`{name}`" in section for name in base)
    for rule in _rules():
        if rule.__name__.startswith("Frozen"):
            continue
        assert rule.__name__ in documented, f"rule {rule.__name__} missing from the guide"
        row = next(line for line in section.splitlines()
                   if line.startswith(f"| `{rule.__name__}` |"))
        for own in {f.name for f in dataclasses.fields(rule)} - base:
            assert f"`{own}`" in row, f"{rule.__name__}'s field {own} is not in its row"


def _steps() -> list[tuple[str, str]]:
    """(language, code) of each fenced block of the worked example, indentation removed."""
    found = []
    for language, code in BLOCK.findall(_section(EXAMPLE)):
        lines = code.splitlines()
        indent = min(len(line) - len(line.lstrip()) for line in lines if line.strip())
        found.append((language, "\n".join(line[indent:] for line in lines) + "\n"))
    return found


def test_the_worked_example_runs_from_nothing_to_a_graded_batch(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}"
           f"{os.environ.get('PATH', '')}", solution_run.CACHE_VAR: str(tmp_path / "cache"),
           sandbox.GROUP_VAR: f"pytest{os.getpid()}-", "OMP_NUM_THREADS": "1"}
    work = tmp_path / "work"
    work.mkdir()
    steps = _steps()
    assert [language for language, _ in steps] == ["python", "python", "bash", "python",
                                                   "bash", "text"]
    said = ""
    for language, code in steps:
        if language == "python":
            name = code.splitlines()[0].removeprefix("# file: ")
            (work / name).parent.mkdir(parents=True, exist_ok=True)
            (work / name).write_text(code)
        elif language == "bash":
            done = subprocess.run(["bash", "-e", "-c", code], cwd=work, env=env,
                                  capture_output=True, text=True, timeout=600)
            assert done.returncode == 0, done.stdout + done.stderr
            said = done.stdout
    # the report the guide shows is the report it gets
    expected = steps[-1][1]
    for line in expected.splitlines():
        assert line.strip() in said, f"{line!r} not in the report:\n{said}"
    assert (work / "course" / "release" / "hw1" / "parts" / "hw1.npz").is_file()
    assert not (work / "course" / "release" / "hw1" / "parts" / "hw1.private.py").exists()
    assert (work / "grades" / "score_histogram.png").read_bytes().startswith(b"\x89PNG")
