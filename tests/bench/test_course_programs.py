"""The course's static programs (edu_dl/bench/course_programs.py, `edu-dl bench plan`'s survey):
every notebook that runs an ``edu_dl.graph`` Session is among them, and each fuses or says why.

A new lecture, exercise or solution that opens a Session fails here until the survey rebuilds its
program (issue 41: every static program of the course fuses or says why not).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from edu_dl.bench import course_programs

ROOT = Path(__file__).resolve().parents[2]
IMPORTS_GRAPH = re.compile(r"^\s*(?:import edu_dl\.graph\b|from edu_dl(?:\.graph)? import\b.*"
                           r"\b(?:graph|Session)\b)", re.M)
OPENS_SESSION = re.compile(r"\bSession\(")


def _code(path: Path) -> str:
    if path.suffix == ".py":
        return path.read_text(encoding="utf-8")
    nb = json.loads(path.read_text(encoding="utf-8"))
    return "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code")


def _stems() -> set[str]:
    return {p.stem for folder in ("lectures", "solutions", "exercises")
            for p in (ROOT / folder).glob("*.ipynb")}


def _sessions_in_the_course() -> dict[str, list[str]]:
    """notebook stem -> the files (notebooks, and part files by their exercise's number) whose
    code imports edu_dl.graph and opens a Session."""
    stems = _stems()
    found: dict[str, list[str]] = {}
    files = [p for folder in ("lectures", "solutions", "exercises")
             for p in sorted((ROOT / folder).glob("*.ipynb"))]
    files += sorted((ROOT / "solutions" / "parts").glob("ex*.py"))
    for path in files:
        code = _code(path)
        if not (IMPORTS_GRAPH.search(code) and OPENS_SESSION.search(code)):
            continue
        if path.suffix == ".py":  # ex07.private.py -> 07_computational_graphs
            number = re.match(r"ex(\d+)", path.name)
            assert number, path
            stem = next(s for s in sorted(stems) if s.startswith(number.group(1) + "_"))
        else:
            stem = path.stem
        found.setdefault(stem, []).append(str(path.relative_to(ROOT)))
    return found


def test_every_notebook_that_opens_an_edu_dl_graph_session_is_in_the_survey() -> None:
    found = _sessions_in_the_course()
    named = {n for p in course_programs.PROGRAMS for n in p.notebooks}
    assert found, "no Session found: the search is broken"
    assert {"07_computational_graphs", "09_tensorflow", "12_static_vs_dynamic"} <= found.keys()
    missing = {stem: files for stem, files in found.items() if stem not in named}
    assert not missing, f"static programs the survey does not rebuild: {missing}"
    assert named <= _stems(), named - _stems()  # no name of a notebook that is gone


def test_each_program_fuses_or_says_why() -> None:
    results = course_programs.survey()
    assert len(results) == len(course_programs.PROGRAMS)
    reasons = {p.name: reason for p, reason in results}
    assert all(isinstance(r, str) for r in reasons.values())
    # What fuses today; a program that stops fusing must say why, and this list says it changed.
    assert {name for name, r in reasons.items() if r} == {
        "two-layer net, softmax cross-entropy", "the RNN unrolled"}, reasons
    assert "dtype" in reasons["two-layer net, softmax cross-entropy"]
    assert "getitem" in reasons["the RNN unrolled"]
    text = course_programs.survey_markdown(results)
    assert f"9 of the {len(results)} static programs" in text
