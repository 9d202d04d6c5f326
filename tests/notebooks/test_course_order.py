"""The course reads in one order everywhere, and the README says where every part id lives.

Lectures are named so that sorting their file names gives the reading order (02, 02b, 02c, 03, ...):
JupyterLab's file browser and the website's table of contents (a sorted glob) both sort them. Moved
material takes a suffix in its new place and its part ids stay (gradebooks hold them), so the
README's table of part ids is the one place that says which notebook asks for which part.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from edu_dl.grading.nbgrader import check_calls
from edu_dl.grading.notebooks import read_notebook

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
NUMBER = re.compile(r"^(\d+[a-z]?)_")
LECTURE_ROW = re.compile(r"^\| (\d+[a-z]?) \|", re.MULTILINE)
PARTS_ROW = re.compile(r"^\| (`ex[^|]*) \| `(\d+[a-z]?_\w+\.ipynb)`", re.MULTILINE)
PATTERN = re.compile(r"`(ex\w+\.(?:\w+|\*))`")


def section(text: str, heading: str) -> str:
    """The README's text under `heading`, up to the next heading of any level."""
    start = text.index(heading) + len(heading)
    following = re.search(r"^#", text[start:], re.MULTILINE)
    return text[start:start + following.start()] if following else text[start:]


def numbers(folder: str) -> list[str]:
    return [NUMBER.match(p.name).group(1) for p in sorted((ROOT / folder).glob("*.ipynb"))]  # type: ignore[union-attr]


def parts_by_notebook() -> dict[str, set[str]]:
    """Each solutions notebook's part ids, from its check("...") calls."""
    found: dict[str, set[str]] = {}
    for path in sorted((ROOT / "solutions").glob("*.ipynb")):
        nb = read_notebook(path)
        found[path.name] = {part for cell in nb.cells if cell.cell_type == "code"
                            for part in check_calls(cell.source)}
    return found


def parts_table(readme: str) -> list[tuple[list[str], str]]:
    """The README's part table: (its patterns, e.g. ['ex06.*', 'ex03.feed_bytes'], notebook)."""
    table = section(readme, "### Where each part id lives")
    return [(PATTERN.findall(patterns), notebook)
            for patterns, notebook in PARTS_ROW.findall(table)]


def resolve(part: str, table: list[tuple[list[str], str]]) -> str | None:
    """The notebook the table gives for `part`: a row naming the id beats a row's `exNN.*`."""
    exact = [nb for patterns, nb in table if part in patterns]
    if exact:
        return exact[0]
    wildcard = [nb for patterns, nb in table if f"{part.split('.')[0]}.*" in patterns]
    return wildcard[0] if wildcard else None


def test_file_names_sort_in_the_readmes_reading_order() -> None:
    listed = LECTURE_ROW.findall(section(README.read_text(), "## The lectures"))
    lectures = [n.lstrip("0") for n in numbers("lectures")]
    assert [n.lstrip("0") for n in listed] == lectures, \
        "README's lecture table and lectures/ differ (sorted file names are the reading order)"


def test_every_lecture_has_its_exercise_and_solution() -> None:
    assert numbers("lectures") == numbers("exercises") == numbers("solutions")


def test_the_website_lists_lectures_and_exercises_by_sorted_name() -> None:
    """Sphinx's glob sorts, so the website's order is the file names' order tested above."""
    index = (ROOT / "site" / "index.md").read_text()
    for folder in ("lectures", "exercises"):
        assert re.search(rf":glob:\n(?::\w+:.*\n)*\n{folder}/\*\n", index), \
            f"site/index.md no longer lists {folder}/* by glob: list them in reading order"


def test_every_part_is_where_the_readme_says() -> None:
    table = parts_table(README.read_text())
    assert table, "README.md has no part table under '### Where each part id lives'"
    wrong = {part: (resolve(part, table), notebook)
             for notebook, parts in parts_by_notebook().items() for part in parts
             if resolve(part, table) != notebook}
    assert not wrong, f"part: (README's notebook, the notebook that checks it): {wrong}"


def test_every_row_of_the_part_table_is_used_and_in_reading_order() -> None:
    table = parts_table(README.read_text())
    used = {part for parts in parts_by_notebook().values() for part in parts}
    for patterns, notebook in table:
        assert (ROOT / "solutions" / notebook).exists(), f"README's part table names {notebook}"
        for pattern in patterns:
            assert any(part == pattern or (pattern.endswith(".*") and
                                           part.startswith(pattern[:-1])) for part in used), \
                f"README's part table lists {pattern}, which no notebook checks"
    order = [notebook for _, notebook in table]
    assert order == sorted(order), "README's part table is not in reading order"


@pytest.mark.parametrize(("part", "want"), [("ex03.feed_bytes", "b.ipynb"),
                                            ("ex03.other", "a.ipynb"), ("ex04.x", None)])
def test_a_named_part_beats_its_exercises_wildcard(part: str, want: str | None) -> None:
    table = [(["ex03.*"], "a.ipynb"), (["ex06.*", "ex03.feed_bytes"], "b.ipynb")]
    assert resolve(part, table) == want
