"""The feedback page a student reads: the restored, executed notebook as nbgrader shows it.

One page per graded notebook, rendered by nbconvert's HTMLExporter (the "lab" template, as
nbgrader's ``generate_feedback``) with ``sanitize_html=True``: Markdown rendered and then
cleaned by bleach, code highlighted by Pygments, plots inline, and above each graded cell a
banner with its score and message. The pages lie where nbgrader's ``release_feedback`` looks,
``feedback/<student>/<assignment>/<notebook>.html``, below ``--out`` and, for an nbgrader
course, below the course folder too (with the ``timestamp.txt`` and ``submission_secret.txt``
that ``release_feedback`` reads).

No HTML or script a student wrote is ever live, by three layers, each enough on its own:

- the notebook rendered is built here, cell by cell, from sources and outputs only: no cell
  or output metadata, outputs reduced to text, PNG/JPEG images whose data is strict base64
  and errors, a Markdown cell's attachments to its PNG/JPEG ones (``trust.notebook``
  reduced the outputs already; this is done again because a page is also made from an older
  ``autograded/`` file);
- nbconvert's sanitizer cleans every Markdown and raw cell and the highlighted code with
  bleach (no script, no event handler, no ``javascript:`` link). Its ``clean_html`` filter
  is replaced by :func:`clean_html`, bleach with Markdown's tags (nbconvert's own list has no
  paragraph or heading, and shows rendered Markdown as escaped tags) and fewer attributes: no
  ``id``, only Pygments' short class names (a student can neither forge a score banner,
  ``edu-grade``, nor take a banner's anchor) and no picture but a PNG/JPEG data URI;
- the page declares a Content-Security-Policy that allows no script at all and loads nothing
  from anywhere (images only as data URIs): our template also leaves out nbconvert's
  require.js, MathJax and Mermaid (so math shows as its TeX source).

The hosted install cell (``edu_dl.notebook.hosted``) is left out, hidden tests are stripped from
every source, and an error raised in a cell that held them shows its name and message only,
said to come from a hidden test when its traceback's line lies in one (``trust.errors``). Each
code cell shows its execution count, as nbgrader's pages do ("In [3]:").

What a page costs is bounded like the rest of the grader's work: text per cell and per page,
images per page, every graded cell and the first :data:`MAX_PAGE_CELLS` others, and
:data:`PAGE_SECONDS` of rendering; the top of the page says what was cut.
"""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import json
import re
import time
from collections.abc import Callable, Iterable
from contextvars import ContextVar
from dataclasses import asdict
from html import escape
from pathlib import Path
from typing import Any

import bleach
import nbconvert
import nbformat
from jinja2 import DictLoader
from nbconvert import HTMLExporter, TemplateExporter
from nbconvert.filters.highlight import Highlight2HTML
from nbconvert.filters.widgetsdatatypefilter import WidgetsDataTypeFilter

from edu_dl.grading.cost import Cost, metered
from edu_dl.grading.model import Job, Row
from edu_dl.grading.nbgrader import BEGIN_HIDDEN, grade_id, hidden_failure, strip_hidden_tests
from edu_dl.grading.notebooks import write_atomic
from edu_dl.grading.stages.page_names import PAGES, anchor, page_path
from edu_dl.grading.trust.errors import raised_in_hidden
from edu_dl.grading.trust.files import SUBMISSION_SECRET, TIMESTAMP, read_submission_secret
from edu_dl.grading.trust.notebook import execution_count
from edu_dl.grading.trust.text import for_terminal, visible
from edu_dl.notebook.hosted import is_install_cell
from edu_dl.speed.tasks import speed_row

KEPT_DATA = ("text/plain", "image/png", "image/jpeg")
BASE64 = re.compile(r"[A-Za-z0-9+/]*={0,2}")
MAX_PAGE_IMAGES = 32 << 20  # base64 characters of images on one page; the rest are named
# A page shows at most this much of one cell's source or one output's text, and this much text in
# all: a 14 MB cell once made a 97 MB page (highlighting multiplies the size); the rest is cut.
MAX_CELL_TEXT = 100_000
MAX_PAGE_TEXT = 2_000_000
# A page shows every graded cell and this many others (the first ones): each cell costs about
# 15 ms to render, and a page of 10,000 Markdown cells once took 284 s and 915 MB.
MAX_PAGE_CELLS = 200
# Once a page has taken this long, its remaining cells are named, not rendered (pathological
# Markdown within the text caps).
PAGE_SECONDS = 20.0
# No script from anywhere, nothing fetched: the page needs nothing from outside itself.
POLICY = ("default-src 'none'; img-src data:; style-src 'unsafe-inline'; "
          "base-uri 'none'; form-action 'none'")
TEMPLATE_NAME = "edu_dl_feedback.html.j2"
TEMPLATE = """{%- extends 'lab/index.html.j2' -%}
{%- block html_head -%}
<meta http-equiv="Content-Security-Policy" content="{{ resources.edu_dl.policy }}">
<meta name="edu-dl-page" content="{{ resources.edu_dl.digest }}">
{{ super() }}
{%- endblock html_head -%}
{%- block html_head_js -%}{%- endblock html_head_js -%}
{%- block jupyter_widgets -%}{%- endblock jupyter_widgets -%}
{%- block html_head_js_mathjax -%}{%- endblock html_head_js_mathjax -%}
{%- block html_head_js_mermaidjs -%}{%- endblock html_head_js_mermaidjs -%}
{%- block extra_css -%}<style type="text/css">{{ resources.edu_dl.style }}</style>
{%- endblock extra_css -%}
{%- block body_header -%}
{{ super() }}
{{ resources.edu_dl.header }}
{%- endblock body_header -%}
{%- block any_cell -%}
{{ cell.metadata.get('edu_dl_banner', '') }}
{{ super() }}
{%- endblock any_cell -%}
"""
STYLE = (".edu-header,.edu-grade{font-family:var(--jp-content-font-family)}"
         ".edu-header{padding:1em 2em}.edu-header td,.edu-header th{padding:.2em .6em;"
         "border-bottom:1px solid #ddd;text-align:left}"
         ".edu-grade{border:2px solid #48a;border-radius:4px;padding:.4em .6em;"
         "margin:1em 0 .3em 0;background:#f4f8fc}.edu-grade.passed{border-color:#2a2;"
         "background:#f2fbf2}.edu-grade.failed,.edu-grade.error,.edu-grade.missing,"
         ".edu-grade.not{border-color:#c22;background:#fdf3f3}.edu-grade.partial{"
         "border-color:#c80;background:#fdf8ee}")


# Markdown's and Pygments' tags; a student's HTML is kept only within them.
TAGS = frozenset({*bleach.ALLOWED_TAGS, "p", "br", "hr", "h1", "h2", "h3", "h4", "h5", "h6",
                  "img", "pre", "code", "span", "div", "table", "thead", "tbody", "tr", "th", "td",
                  "del", "sub", "sup", "dl", "dt", "dd", "kbd", "samp", "var"})
# data: only for an <img> of PNG/JPEG (_attribute_allowed), never for a link.
PROTOCOLS = frozenset({"http", "https", "mailto", "data"})
# Pygments' token classes (k, nb, s1, ...) and nbconvert's "highlight hl-python"; not "edu-".
CODE_CLASS = re.compile(r"[a-z]{1,3}[0-9]?|highlight|anchor-link|hl-[a-z0-9+#-]{1,30}")
ALIGN = frozenset({"left", "right", "center"})


def _attribute_allowed(tag: str, name: str, value: str) -> bool:
    if tag == "img":  # a picture the page holds (an attachment), never a file or an address
        return name in ("alt", "title") or (name == "src" and _image_uri(value))
    if name == "class":
        return all(CODE_CLASS.fullmatch(token) for token in value.split())
    if tag == "a":
        return name == "title" or (name == "href" and
                                   not value.strip().lower().startswith("data:"))
    if tag in ("abbr", "acronym"):
        return name == "title"
    return tag in ("th", "td") and name == "align" and value in ALIGN


def _image_uri(value: str) -> bool:
    kind, _, data = value.partition(";base64,")
    return kind in ("data:image/png", "data:image/jpeg") and _image(data) is not None


class _Clock:
    """The time budget of the page being rendered, and how many cells it cut."""

    def __init__(self, seconds: float) -> None:
        self.deadline, self.cut = time.monotonic() + seconds, 0


_PAGE: ContextVar[_Clock | None] = ContextVar("feedback_page_clock", default=None)
LATE = '<pre>[not rendered: the page ran out of its time budget]</pre>'


def clean_html(html: Any) -> str:
    """HTML a student's text became (Markdown, highlighted code, a raw cell) with only
    harmless tags and attributes left: everything else is shown as text. Past the page's
    time budget (:func:`render`), a note instead."""
    clock = _PAGE.get()
    if clock is not None and time.monotonic() > clock.deadline:
        clock.cut += 1
        return LATE
    text = html.decode() if isinstance(html, bytes) else str(html)
    return _cleaned(text) if len(text) <= CACHED_CHARS else _clean(text)


def _clean(text: str) -> str:
    return bleach.clean(text, tags=TAGS, attributes=_attribute_allowed, protocols=PROTOCOLS,
                        strip_comments=True)


# The cells every student's page shares (tests, locked cells, the source's Markdown) are
# cleaned once per process, not once per page: bleach was 40% of a page's time. Bounded: at
# most CACHED_TEXTS texts of CACHED_CHARS characters each, their cleaned copies beside them.
CACHED_CHARS, CACHED_TEXTS = 8192, 1024
_cleaned = functools.lru_cache(maxsize=CACHED_TEXTS)(_clean)


def _h(text: Any) -> str:
    return escape(for_terminal(text))


def _status_class(status: str) -> str:
    return re.sub(r"[^a-z-]", "", (status.split() or ["none"])[0].lower()) or "none"


def _banner(rows: list[Row], cell_id: str) -> str:
    """Our markup (the page's only), every text in it escaped."""
    lines = "".join(f'<div class="edu-grade {_status_class(r.status)}"><b>{_h(r.part)}: '
                    f"{r.points:g} / {r.max_points:g}</b> ({_h(r.status)}) {_h(r.message)}"
                    "</div>" for r in rows)
    return f'<div id="{anchor(cell_id)}">{lines}</div>'


def _header(student: str, exercise: str, rows: list[Row], targets: dict[str, str]) -> str:
    """The page's top: the score and a table of every row, each part linked to its banner
    (``targets``: part -> grade_id of the cell it is shown above)."""
    got, total = sum(r.points for r in rows), sum(r.max_points for r in rows)
    lines = [f'<div class="edu-header"><h1>{_h(exercise)}: {got:g} / {total:g}</h1>'
             f"<p>Feedback for {_h(student)}: each graded cell below shows its score above "
             "it.</p><table><tr><th>part</th><th>points</th><th>status</th><th>message</th>"
             "</tr>"]
    for r in rows:
        part = _h(r.part or "-")
        if r.part in targets:
            part = f'<a href="#{anchor(targets[r.part])}">{part}</a>'
        lines.append(f"<tr><td>{part}</td><td>{r.points:g} / {r.max_points:g}</td>"
                     f"<td>{_h(r.status)}</td><td>{_h(r.message)}</td></tr>")
    lines.append("</table></div>")
    return "".join(lines)


# --------------------------------------------------------------------------- the notebook shown


def _text(value: Any) -> str:
    """nbformat's multiline text as one string, lone surrogates written out."""
    if isinstance(value, list):
        return visible("".join(v for v in value if isinstance(v, str)))
    return visible(value) if isinstance(value, str) else ""


def _capped(text: str, budget: list[int]) -> str:
    """``text`` within MAX_CELL_TEXT and what is left of the page's text ``budget``; a cut
    says how much was left out."""
    limit = max(0, min(MAX_CELL_TEXT, budget[0]))
    if len(text) <= limit:
        budget[0] -= len(text)
        return text
    budget[0] -= limit
    return text[:limit] + f"\n[... {len(text) - limit:,} more characters not shown here]"


def _image(value: Any) -> str | None:
    """Strict base64 (what an <img> data URI may hold), or None."""
    text = _text(value).replace("\n", "")
    if not text or len(text) % 4 or not BASE64.fullmatch(text):
        return None
    try:
        base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return None
    return text


def _outputs(outputs: Any, hidden: str | None, count: int | None, budget: list[int],
             text: list[int]) -> list[Any]:
    """A cell's outputs reduced to what the page may show (fresh nodes, no metadata, text
    within the page's ``text`` budget). ``hidden``: the cell's source when it held hidden tests,
    which a traceback would quote: its error shows its name and message only, said to come from
    a hidden test when it does (``count``: the cell's execution count, which its traceback
    names)."""
    kept = []
    for output in outputs if isinstance(outputs, list) else []:
        kind = output.get("output_type") if isinstance(output, dict) else None
        if kind == "stream":
            name = "stderr" if output.get("name") == "stderr" else "stdout"
            kept.append(nbformat.v4.new_output("stream", name=name,
                                               text=_capped(_text(output.get("text")), text)))
        elif kind == "error":
            ename = _capped(_text(output.get("ename")), text)
            evalue = _capped(_text(output.get("evalue")), text)
            traceback = [] if hidden is not None else [
                _capped(_text(line), text) for line in (output.get("traceback") or [])[:100]]
            if hidden is not None and raised_in_hidden(hidden, output.get("traceback"), count):
                traceback = [hidden_failure(f"{ename}: {evalue}")]
            kept.append(nbformat.v4.new_output("error", ename=ename, evalue=evalue,
                                               traceback=traceback or [f"{ename}: {evalue}"]))
        elif kind in ("execute_result", "display_data"):
            data = output.get("data") if isinstance(output.get("data"), dict) else {}
            shown: dict[str, str] = {}
            for mime in KEPT_DATA:
                if mime not in data:
                    continue
                if mime == "text/plain":
                    shown[mime] = _capped(_text(data[mime]), text)
                    continue
                image = _image(data[mime])
                if image is not None and len(image) <= budget[0]:
                    budget[0] -= len(image)
                    shown[mime] = image
                elif "text/plain" not in data:
                    shown["text/plain"] = "[an image left out: " + (
                        "not base64]" if image is None else "the page holds enough images]")
            if not shown:  # HTML, JavaScript, SVG, widgets: never shown
                continue
            if kind == "display_data":
                kept.append(nbformat.v4.new_output("display_data", data=shown))
            else:
                kept.append(nbformat.v4.new_output("execute_result", data=shown,
                                                   execution_count=count))
    return kept


ATTACHMENT = re.compile(r"attachment:([^\s)\"'>]*)")


def _attachments(source: str, attachments: Any, budget: list[int]
                 ) -> tuple[str, dict[str, dict[str, str]]]:
    """A Markdown cell's PNG/JPEG attachments whose data is strict base64, and its source with
    every other ``attachment:`` reference disarmed (nbconvert stops on a missing one)."""
    kept: dict[str, dict[str, str]] = {}
    for name, bundle in (attachments if isinstance(attachments, dict) else {}).items():
        for mime in ("image/png", "image/jpeg"):
            image = _image(bundle.get(mime)) if isinstance(bundle, dict) else None
            if image is not None and len(image) <= budget[0]:
                budget[0] -= len(image)
                kept[str(name)] = {mime: image}
                break
    source = ATTACHMENT.sub(lambda m: m.group(0) if m.group(1) in kept else
                            "missing-attachment:" + m.group(1), source)
    return source, kept


def _gap(skipped: int) -> Any:
    """Where cells were left out: one line saying how many."""
    return nbformat.v4.new_raw_cell(f"[... {skipped:,} cell{'s' * (skipped != 1)} not shown "
                                    "here]")


def for_students(nb: Any, banners: dict[str, str], max_cells: int | None = None) -> Any:
    """The notebook a page shows: a new one, built from ``nb``'s sources and outputs only
    (install cell left out, hidden tests stripped), each graded cell with its banner. Of the
    cells without a banner, the first ``max_cells`` are shown and the others are named by
    gap (``metadata.edu_dl_cut``: [cells shown, cells in all, ``max_cells``] when some were
    left out; default MAX_PAGE_CELLS)."""
    max_cells = MAX_PAGE_CELLS if max_cells is None else max_cells
    budget, text = [MAX_PAGE_IMAGES], [MAX_PAGE_TEXT]
    cells: list[Any] = []
    plain = skipped = total = 0
    for cell in nb.cells:
        kind, source = cell.get("cell_type"), _text(cell.get("source"))
        if kind == "code" and is_install_cell(nbformat.from_dict(
                {"cell_type": "code", "source": source})):
            continue
        total += 1
        gid = grade_id(cell)
        if gid is None or gid not in banners:
            plain += 1
            if plain > max_cells:
                skipped += 1
                continue
        if skipped:
            cells.append(_gap(skipped))
            skipped = 0
        hidden = source if BEGIN_HIDDEN.lstrip("# ") in source else None
        source = _capped(strip_hidden_tests(source), text)
        if kind == "code":
            count = execution_count(cell.get("execution_count"))
            new = nbformat.v4.new_code_cell(source, outputs=_outputs(
                cell.get("outputs"), hidden, count, budget, text))
            new.execution_count = count
        elif kind == "markdown":
            new = nbformat.v4.new_markdown_cell()
            new.source, new.attachments = _attachments(source, cell.get("attachments"), budget)
        else:  # raw: shown as text (the sanitizer cleans it as Markdown's HTML)
            new = nbformat.v4.new_raw_cell(source)
        if gid is not None and gid in banners:
            new.metadata["edu_dl_banner"] = banners[gid]
        cells.append(new)
    if skipped:
        cells.append(_gap(skipped))
    for index, cell in enumerate(cells):  # the same page for the same notebook (nbformat's
        cell.id = f"c{index}"  # ids are random)
    shown = nbformat.v4.new_notebook(cells=cells)
    shown.metadata["language_info"] = {"name": "python"}
    if plain > max_cells:
        shown.metadata["edu_dl_cut"] = [total - (plain - max_cells), total, max_cells]
    return shown


def _cut_note(shown: Any, clock: _Clock) -> str:
    """What the page left out, in a sentence or two (our markup; "" when nothing)."""
    notes = []
    if "edu_dl_cut" in shown.metadata:
        kept, total, others = shown.metadata["edu_dl_cut"]
        notes.append(f"This page shows {kept:,} of {total:,} cells: every graded cell and the "
                     f"first {others:,} others.")
    if clock.cut:
        notes.append(f"{clock.cut:,} cell{'s were' if clock.cut != 1 else ' was'} not rendered: "
                     f"the page ran out of its time budget of {PAGE_SECONDS:g} s.")
    return f'<p class="edu-cut">{" ".join(notes)}</p>' if notes else ""


class FeedbackExporter(HTMLExporter):
    """nbconvert's HTML exporter (7.x) less its last step, which parses the whole page again
    with BeautifulSoup to give images an alt text and cells a tabindex: that was 28% of a
    page's time. :func:`accessible` adds the same two with one pass of regular expressions."""

    def from_notebook_node(  # type: ignore[override]
            self, nb: Any, resources: dict[str, Any] | None = None, **kw: Any
    ) -> tuple[str, dict[str, Any]]:
        """HTMLExporter.from_notebook_node as nbconvert 7 writes it, up to its soup."""
        info = nb.metadata.get("language_info", {})
        lexer = info.get("pygments_lexer", info.get("name", None))
        self.register_filter("highlight_code", self.filters.get(
            "highlight_code", Highlight2HTML(pygments_lexer=lexer, parent=self)))
        resources = self._init_resources(resources)
        self.register_filter("filter_data_type", WidgetsDataTypeFilter(
            notebook_metadata=self._nb_metadata, parent=self, resources=resources))
        html, resources = TemplateExporter.from_notebook_node(self, nb, resources, **kw)
        return accessible(html), resources


# What nbconvert's soup marks (its selectors "img:not([alt])" and the cells' wrappers). Only
# our template writes "jp-" classes: a student's HTML keeps none (CODE_CLASS).
_NO_ALT = re.compile(r"<img(?![^>]*\balt=)(?=[\s>/])")
_FOCUSABLE = re.compile(r'<div class="(?:[^"]*\s)?(?:jp-Cell-inputWrapper|jp-OutputArea-output)'
                        r'(?:\s[^"]*)?"')
NO_ALT = "No description has been provided for this image"


def accessible(html: str) -> str:
    """What nbconvert's HTML exporter adds to a page: an alt text on every image without one,
    and tabindex="0" on every cell's input wrapper and output (keyboard users reach them)."""
    html = _NO_ALT.sub(f'<img alt="{NO_ALT}"', html)
    return _FOCUSABLE.sub(lambda m: m.group(0) + ' tabindex="0"', html)


def exporter() -> HTMLExporter:
    """nbconvert's HTML exporter as the pages use it (make one per batch: it loads templates)."""
    return FeedbackExporter(extra_loaders=[DictLoader({TEMPLATE_NAME: TEMPLATE})],
                            template_file=TEMPLATE_NAME, sanitize_html=True,
                            filters={"clean_html": clean_html})


# What a page is made with: this module, nbconvert's and bleach's versions.
RENDERER = hashlib.sha256(Path(__file__).read_bytes() + f" {nbconvert.__version__} "
                          f"{bleach.__version__}".encode()).hexdigest()
HEAD_BYTES = 8192  # a page's digest lies in its <head>, well within these
OUR_PAGE = b'name="edu-dl-page"'  # how a page of ours says so, in its <head> (any attribute order)


def digest(student: str, exercise: str, nb: Any, rows: list[Row],
           parts: Iterable[tuple[str, str]] = ()) -> str:
    """Of everything a page is made from: a page that holds it need not be made again (a
    second run, or one that merges the manual sheet, renders only what changed)."""
    h = hashlib.sha256(RENDERER.encode())
    h.update(json.dumps([student, exercise, nb, [asdict(r) for r in rows], list(parts)],
                        sort_keys=True, default=str).encode())
    return h.hexdigest()


def _made_already(path: Path, page_digest: str) -> bytes | None:
    """The page at ``path`` (ours, below --out) if it was made from the same inputs."""
    try:
        if path.is_symlink():
            return None
        data = path.read_bytes()
    except OSError:
        return None
    return data if page_digest.encode() in data[:HEAD_BYTES] else None


def render(student: str, exercise: str, nb: Any, rows: list[Row],
           parts: Iterable[tuple[str, str]] = (), html: HTMLExporter | None = None) -> str:
    """One notebook's feedback page. ``parts``: (part id, test cell grade_id) of the check()
    parts, whose banners go above their test cells; every other row's part is a grade_id."""
    parts = list(parts)
    cell_of = dict(parts)
    by_cell: dict[str, list[Row]] = {}
    for r in rows:
        by_cell.setdefault(cell_of.get(r.part, r.part), []).append(r)
    present = {grade_id(c) for c in nb.cells} - {None}
    banners = {gid: _banner(mine, gid) for gid, mine in by_cell.items() if gid in present}
    targets = {r.part: cell_of.get(r.part, r.part) for r in rows
               if cell_of.get(r.part, r.part) in banners}
    header = _header(student, exercise, rows, targets)
    resources = {"metadata": {"name": f"Feedback: {exercise}"},
                 "edu_dl": {"policy": POLICY, "style": STYLE, "header": header,
                            "digest": digest(student, exercise, nb, rows, parts)}}
    shown, clock = for_students(nb, banners), _Clock(PAGE_SECONDS)
    body = _export(shown, resources, clock, html)
    # The header is ours and comes before every cell: the note goes right after it.
    body = body.replace(header, header + _cut_note(shown, clock), 1)
    return visible(body)


def render_cell(cell: Any, html: HTMLExporter | None = None) -> str:
    """One cell alone (source and outputs), as a page shows it: the same reduction, sanitizer,
    template and policy, without header or banner (``edu-dl mark`` shows an answer so)."""
    shown, clock = for_students(nbformat.v4.new_notebook(cells=[cell]), {}), _Clock(PAGE_SECONDS)
    resources = {"metadata": {"name": "Answer"}, "edu_dl": {"policy": POLICY, "style": STYLE,
                                                             "header": "", "digest": ""}}
    return visible(_export(shown, resources, clock, html))


def _export(shown: Any, resources: dict[str, Any], clock: _Clock,
            html: HTMLExporter | None) -> str:
    token = _PAGE.set(clock)
    try:
        return (html or exporter()).from_notebook_node(shown, resources)[0]
    finally:
        _PAGE.reset(token)


# --------------------------------------------------------------------------- writing the pages


def write_pages(out: Path, rows: list[Row], jobs: list[Job],
                executed: Callable[[Job], Any] | None, course: Path | None = None,
                log: Callable[[str], None] = print,
                costs: dict[tuple[str, str], Cost] | None = None) -> dict[tuple[str, str], str]:
    """Write every graded notebook's page below ``out`` (and ``course``: an nbgrader course
    folder); returns (student, exercise) -> the page's path relative to ``out``. A page that
    cannot be made is logged and left out: it never costs another student theirs. ``costs``
    gets what reading and rendering each page made now cost the grader."""
    if executed is None:
        return {}
    by_job: dict[tuple[str, str], list[Row]] = {}
    for r in rows:
        by_job.setdefault((r.student, r.exercise), []).append(r)
    try:
        html = exporter()
    except Exception as exc:  # nbconvert's templates missing: the gradebooks come first
        log(f"no feedback pages: nbconvert's HTML exporter cannot start ({exc})")
        return {}
    written: dict[tuple[str, str], str] = {}
    replaced: list[str] = []  # pages in the nbgrader course that another tool made
    for job in jobs:
        key = (job.student, job.exercise.name)
        try:
            with metered() as spent:  # reading the notebook too: what a page costs the grader
                nb = executed(job)
                if nb is None:
                    continue
                mine = by_job.get(key, [])
                where = page_path(job.student, job.assignment, job.exercise.name)
                placed = [*job.exercise.parts,  # a speed row's banner: above its test cell
                          *((speed_row(p), cell) for p, cell in job.exercise.parts
                            if speed_row(p) in job.exercise.speed)]
                page = _made_already(out / where, digest(job.student, job.exercise.name, nb,
                                                         mine, placed))
                if page is None:
                    page = render(job.student, job.exercise.name, nb, mine, placed,
                                  html).encode()
                    write_atomic(out / where, page)
            if costs is not None:
                costs[key] = spent
            written[key] = where
            if course is not None:
                if _made_elsewhere(course / where):
                    replaced.append(where)
                _release(course / where, page, job)
        except Exception as exc:  # one page must not cost the others theirs
            log(for_terminal(f"the feedback page of {job.student!r} for {job.exercise.name} "
                             f"could not be written ({type(exc).__name__}: {exc})"))
    if replaced and course is not None:
        log(for_terminal(
            f"replaced {len(replaced)} feedback page(s) in {course / PAGES} that edu-dl did "
            f"not make (nbgrader's generate_feedback does; the first: {replaced[0]}): "
            "nbgrader's release_feedback now sends edu-dl's pages, and running "
            "generate_feedback again puts nbgrader's back"))
    return written


def _made_elsewhere(path: Path) -> bool:
    """Whether ``path`` holds a page that edu-dl did not write (nbgrader's own, say): every
    page of ours declares itself in its <head>."""
    try:
        if path.is_symlink() or not path.is_file():
            return False
        with path.open("rb") as f:
            head = f.read(HEAD_BYTES)
    except OSError:
        return False
    return OUR_PAGE not in head


def _release(path: Path, page: bytes, job: Job) -> None:
    """The page where nbgrader's release_feedback looks, with the two files it reads."""
    write_atomic(path, page)
    if job.timestamp is not None:
        write_atomic(path.parent / TIMESTAMP,
                     f"{job.timestamp:%Y-%m-%d %H:%M:%S.%f} UTC".encode())
    secret = read_submission_secret(job.path.parent) if job.path is not None else None
    if secret is not None:
        write_atomic(path.parent / SUBMISSION_SECRET, secret)
