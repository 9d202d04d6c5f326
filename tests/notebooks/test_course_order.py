"""The course reads in one order everywhere; lecture N, exercise N and part exNN.* are one thing.

Lectures are numbered 01, 02, ... in reading order, without gaps or letter suffixes, so sorting
their file names gives that order (JupyterLab's file browser and the website's table of contents,
a sorted glob, both sort them). Every part id's prefix is the number of the notebook that asks for
it, and the files of exercise NN (its part file, its release, its public harness, its tests) carry
the same number.
"""

from __future__ import annotations

import re
from pathlib import Path

from edu_dl.grading.nbgrader import check_calls
from edu_dl.grading.notebooks import read_notebook

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
NAME = re.compile(r"^(\d\d)_[a-z0-9_]+\.ipynb$")
LECTURE_ROW = re.compile(r"^\| (\d+) \|", re.MULTILINE)
PART_ID = re.compile(r"^ex(\d\d)\.[a-z_][a-z0-9_]*$")


def section(text: str, heading: str) -> str:
    """The README's text under `heading`, up to the next heading of any level."""
    start = text.index(heading) + len(heading)
    following = re.search(r"^#", text[start:], re.MULTILINE)
    return text[start:start + following.start()] if following else text[start:]


def numbers(folder: str) -> list[str]:
    """The numbers of the notebooks in `folder`, in sorted order; a bad name fails the test."""
    names = [p.name for p in sorted((ROOT / folder).glob("*.ipynb"))]
    bad = [n for n in names if not NAME.match(n)]
    assert not bad, f"{folder}/: {bad} is not NN_name.ipynb (two digits, no letter suffix)"
    return [n[:2] for n in names]


def parts_by_notebook() -> dict[str, set[str]]:
    """Each solutions notebook's part ids, from its check("...") calls."""
    found: dict[str, set[str]] = {}
    for path in sorted((ROOT / "solutions").glob("*.ipynb")):
        nb = read_notebook(path)
        found[path.name] = {part for cell in nb.cells if cell.cell_type == "code"
                            for part in check_calls(cell.source)}
    return found


def test_lectures_are_numbered_from_01_without_gaps() -> None:
    found = numbers("lectures")
    assert found == [f"{n:02d}" for n in range(1, len(found) + 1)], found


def test_file_names_sort_in_the_readmes_reading_order() -> None:
    listed = LECTURE_ROW.findall(section(README.read_text(), "## The lectures"))
    assert listed == numbers("lectures"), \
        "README's lecture table and lectures/ differ (sorted file names are the reading order)"


def test_every_lecture_has_its_exercise_and_solution() -> None:
    assert numbers("lectures") == numbers("exercises") == numbers("solutions")


def test_the_website_lists_lectures_and_exercises_by_sorted_name() -> None:
    """Sphinx's glob sorts, so the website's order is the file names' order tested above."""
    index = (ROOT / "site" / "index.md").read_text()
    for folder in ("lectures", "exercises"):
        assert re.search(rf":glob:\n(?::\w+:.*\n)*\n{folder}/\*\n", index), \
            f"site/index.md no longer lists {folder}/* by glob: list them in reading order"


def test_every_part_prefix_is_its_notebooks_number() -> None:
    wrong = {}
    for notebook, parts in parts_by_notebook().items():
        for part in parts:
            match = PART_ID.match(part)
            if match is None or match.group(1) != notebook[:2]:
                wrong[part] = notebook
    assert not wrong, f"part id: the notebook that checks it (prefix != its number): {wrong}"


def test_each_exercises_files_carry_its_number() -> None:
    """Part files, releases, harness modules and part tests exist only for exercises that have
    parts, under their notebook's number."""
    with_parts = {nb[:2] for nb, parts in parts_by_notebook().items() if parts}
    folders = {
        "solutions/parts": r"ex(\d\d)\.private\.py",
        "exercises/parts": r"ex(\d\d)\.npz",
        "tests/exercises": r"test_parts_ex(\d\d)\.py",
        "edu_dl/harness": r"ex(\d\d)\.py",
    }
    for folder, pattern in folders.items():
        found = {m.group(1) for p in (ROOT / folder).iterdir()
                 if (m := re.fullmatch(pattern, p.name))}
        assert found <= with_parts, f"{folder}: {sorted(found - with_parts)} has no notebook parts"
        if folder != "edu_dl/harness":  # an exercise may need no public grading code
            assert found == with_parts, f"{folder}: missing {sorted(with_parts - found)}"
