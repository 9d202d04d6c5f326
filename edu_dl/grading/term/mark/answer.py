"""A row's answer as the feedback page shows it, and a student's names kept out of it.

The answer is the graded cell of the executed notebook ``edu-dl grade`` kept in
``OUT/autograded/`` (its source and its outputs: text, plots), rendered alone by the feedback
page's own renderer (``feedback.render_cell``: Markdown rendered and cleaned by the same
sanitizer, code highlighted, only PNG/JPEG pictures, a policy that runs no script). ``app``
serves it in a sandboxed frame of its own.

Anonymous, the student's id and every name the roster gives them (first, last, both, e-mail)
are replaced by their pseudonym wherever the answer shows them (source and output text), in
any case, as whole words; an answer that still shows one once rendered (spelled with HTML
entities, say) is not shown.
"""

from __future__ import annotations

import copy
import functools
import re
from collections.abc import Iterable
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

from edu_dl.grading.model import safe_file_name
from edu_dl.grading.nbgrader import grade_id
from edu_dl.grading.stages.feedback import exporter, render_cell
from edu_dl.grading.trust.bounded import read_bounded
from edu_dl.grading.trust.notebook import parse_notebook

MAX_NOTEBOOK_BYTES = 256 << 20  # an executed notebook: the submission and its outputs


def name_pattern(student: str, names: Iterable[str] = ()) -> re.Pattern[str]:
    """Every form of the student's names: the id and ``names`` (a roster's first name, last
    name and e-mail; the first two also together), whole words, in any case."""
    given = [n.strip() for n in names]
    forms = {student.strip(), *given}
    if len(given) >= 2 and given[0] and given[1]:
        forms.add(f"{given[0]} {given[1]}")
    words = sorted((f for f in forms if f), key=len, reverse=True)
    alternatives = (r"\s+".join(re.escape(part) for part in form.split()) for form in words)
    return re.compile(r"(?<!\w)(?:" + "|".join(alternatives) + r")(?!\w)", re.IGNORECASE)


def hidden(text: str, pattern: re.Pattern[str] | None, alias: str) -> str:
    """``text`` with every name ``pattern`` matches replaced by ``alias`` (None: as it is)."""
    return text if pattern is None else pattern.sub(alias, text)


def autograded_path(out: Path, student: str, assignment: str, exercise: str) -> Path:
    """Where ``edu-dl grade`` keeps the executed notebook (nbgrader's autograded/ layout)."""
    return (out / "autograded" / safe_file_name(student) / safe_file_name(assignment)
            / f"{exercise}.ipynb")


@functools.lru_cache(maxsize=4)
def _cells(path: Path, stamp: tuple[int, int]) -> dict[str, Any]:
    """grade_id -> cell of the notebook at ``path`` as it was at ``stamp`` (mtime, size)."""
    nb = parse_notebook(read_bounded(path, MAX_NOTEBOOK_BYTES, "for an executed notebook"),
                        path.name)
    return {gid: cell for cell in nb.cells if (gid := grade_id(cell)) is not None}


def graded_cell(path: Path, cell_id: str) -> Any | None:
    """The cell ``cell_id`` of the executed notebook at ``path`` (never through a link); None
    when there is no such notebook or cell, or it cannot be read."""
    try:
        if path.is_symlink() or not path.is_file():
            return None
        stat = path.stat()
        return _cells(path, (stat.st_mtime_ns, stat.st_size)).get(cell_id)
    except (OSError, RecursionError, ValueError):  # Refused, NotebookError: ValueErrors
        return None


def _hidden_cell(cell: Any, pattern: re.Pattern[str], alias: str) -> Any:
    """A copy of ``cell`` with the names replaced in its source and its outputs' text."""
    cell = copy.deepcopy(cell)

    def clean(value: Any) -> Any:
        if isinstance(value, list):
            return [clean(v) for v in value]
        return hidden(value, pattern, alias) if isinstance(value, str) else value

    cell["source"] = clean(cell.get("source", ""))
    for output in cell.get("outputs") or []:
        if not isinstance(output, dict):
            continue
        for key in ("text", "ename", "evalue", "traceback"):
            if key in output:
                output[key] = clean(output[key])
        data = output.get("data")
        if isinstance(data, dict) and "text/plain" in data:
            data["text/plain"] = clean(data["text/plain"])
    return cell


class _Shown(HTMLParser):
    """What a reader of the page sees: its text and attribute values (not the style, nor an
    image's data or a highlighter's class names)."""

    def __init__(self, html: str) -> None:
        super().__init__()
        self.parts: list[str] = []
        self._style = False
        self.feed(html)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._style = tag in ("style", "script")
        self.parts += [v for k, v in attrs if v and k not in ("src", "class", "content")]

    def handle_endtag(self, tag: str) -> None:
        self._style = False

    def handle_data(self, data: str) -> None:
        if not self._style:
            self.parts.append(data)


class NameShown(ValueError):
    """The rendered answer still shows the student's name."""


_html: list[Any] = []  # one exporter per process (it loads templates)


def answer_html(cell: Any, pattern: re.Pattern[str] | None, alias: str) -> str:
    """The cell rendered as its feedback page shows it; with ``pattern`` (anonymous), its names
    replaced by ``alias`` first, and NameShown when the page still shows one."""
    if pattern is not None:
        cell = _hidden_cell(cell, pattern, alias)
    if not _html:
        _html.append(exporter())
    page = render_cell(cell, _html[0])
    if pattern is not None and pattern.search("\n".join(_Shown(page).parts)):
        raise NameShown("the answer shows the student's name in a form that cannot be "
                        "replaced: not shown while grading anonymously")
    return page
