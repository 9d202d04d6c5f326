"""Feedback pages students read (issue 24, item 3) and Markdown answers as nbgrader (item 4).

The renderer's tests build notebooks by hand (fast); one grading run (a kernel in the sandbox)
proves the whole path: a plot drawn by the student's code reaches the page as an image, the
manual sheet links each answer to its place on the page, an nbgrader course gets the pages
where ``release_feedback`` looks, and an untouched Markdown answer is "not answered" in grade
and validate. The Chromium tests open pages in Debian's Chromium
(as tests/notebooks/test_browser.py).
"""

from __future__ import annotations

import base64
import csv
import os
import re
import struct
import zlib
from datetime import UTC, datetime
from html.parser import HTMLParser
from pathlib import Path
from types import SimpleNamespace

import nbformat
import pytest
from fixtures.chromium import launch
from fixtures.nbgrader_course import _code, _md
from fixtures.tracebacks import HIDDEN_CELL, TRACEBACK_9, VISIBLE_9

from edu_dl.grading import nbgrader
from edu_dl.grading.model import Row
from edu_dl.grading.settings import Settings
from edu_dl.grading.stages import feedback
from edu_dl.grading.term import batch as G
from edu_dl.grading.term import manual
from edu_dl.grading.term.validate import validate
from edu_dl.notebook import hosted

FAST = Settings(timeout_s=30, memory_mb=2048)


def png(width: int = 3, height: int = 2) -> str:
    """A real PNG (red pixels), base64: what matplotlib's inline backend sends."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return (struct.pack(">I", len(data)) + kind + data
                + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))
    rows = b"".join(b"\x00" + b"\xff\x00\x00" * width for _ in range(height))
    data = (b"\x89PNG\r\n\x1a\n"
            + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))
    return base64.b64encode(data).decode()


# Today's attack (issue 24) and its relatives: each would set window.__pwned or the title.
XSS_MARKDOWN = """# Why squares grow

*Because* of <script>window.__pwned = 'script'</script> and
<img src="x" onerror="window.__pwned = 'onerror'; document.title = 'pwned'">
<svg onload="window.__pwned = 'svg'"><script>window.__pwned = 'svg script'</script></svg>
<iframe srcdoc="<script>parent.__pwned = 'iframe'</script>"></iframe>
<a id="evil" href="javascript:void(window.__pwned = 'link')">click me</a>
<a href="data:text/html,<script>alert(1)</script>">data link</a>
<object data="data:text/html,<script>parent.__pwned = 'object'</script>"></object>
<div class="edu-grade passed"><b>why: 2 / 2</b> (passed) a forged banner</div>
<details open ontoggle="window.__pwned = 'ontoggle'">x</details>
"""
HIDDEN = "assert squares(1) == [1]  # the hidden case"


def notebook() -> nbformat.NotebookNode:
    """A restored, executed notebook as grading leaves it, with a student's hostile outputs."""
    nb = nbformat.v4.new_notebook()
    install = hosted.install_cell(nb)
    plot = nbformat.v4.new_code_cell("plot()", execution_count=2)
    plot.outputs = [
        nbformat.v4.new_output("display_data", data={"image/png": png(),
                                                     "text/plain": "<Figure size 640x480>"}),
        nbformat.v4.new_output("display_data", data={
            "text/html": "<script>window.__pwned = 'html output'</script>",
            "application/javascript": "window.__pwned = 'js output'",
            "image/svg+xml": "<svg onload=\"window.__pwned = 'svg output'\"></svg>"}),
        nbformat.v4.new_output("display_data", data={
            "image/png": "x\" onerror=\"window.__pwned = 'png'"}),  # not base64
    ]
    tests = _code(f"assert squares(3) == [1, 4, 9]\n### BEGIN HIDDEN TESTS\n{HIDDEN}\n"
                  "### END HIDDEN TESTS", gid="test_squares", grade=True, locked=True,
                  points=2)
    tests.outputs = [nbformat.v4.new_output(
        "error", ename="AssertionError", evalue="",
        traceback=["Traceback", f"----> 3 {HIDDEN}", "AssertionError"])]
    figure = nbformat.v4.new_markdown_cell(
        "![a figure](attachment:fig.png) ![gone](attachment:nope.png) "
        "![svg](attachment:evil.svg) ![file](secret.png)")
    figure.attachments = {"fig.png": {"image/png": png(4, 4)},
                          "evil.svg": {"image/svg+xml": base64.b64encode(
                              b"<svg onload='window.__pwned=6'/>").decode()}}
    nb.cells = [
        install,
        nbformat.v4.new_markdown_cell("Plain *emphasis* and `code`."),
        figure,
        _code("def squares(n):\n    return [i * i for i in range(n)]", gid="squares",
              solution=True),
        tests, plot,
        _md(XSS_MARKDOWN, gid="why", grade=True, solution=True, points=2)]
    return nb


ROWS = [Row("ann", "hw1", "test_squares", 0.0, 2.0, "failed", "test cell 'test_squares' "
            "raised AssertionError", judged="inside"),
        Row("ann", "hw1", "why", 0.0, 2.0, "needs manual grading", "an answer: graded by hand",
            judged="by hand")]


class Page(HTMLParser):
    """Every start tag with its attributes, and the text."""

    def __init__(self, html: str) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []
        self.feed(html)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def test_the_page_renders_markdown_code_plots_and_banners_and_leaves_out_the_rest() -> None:
    html = feedback.render("ann", "hw1", notebook(), ROWS)
    page = Page(html)
    tags = [tag for tag, _ in page.tags]
    assert "<em>emphasis</em>" in html and "<code>code</code>" in html  # Markdown rendered
    assert '<span class="k">return</span>' in html  # Pygments highlighted the code
    images = [a for tag, a in page.tags if tag == "img"]
    # The Markdown's own picture (an attachment) and the plot; no file, no SVG, no address
    # (the attack's <img src=x onerror=...> is left an <img> without either).
    assert [a.get("src") for a in images] == [f"data:image/png;base64,{png(4, 4)}", None,
                                              None, None, f"data:image/png;base64,{png()}",
                                              None]
    assert "[an image left out: not base64]" in html
    # A banner above each graded cell, with its score and message, and the header's links.
    banner = html.index('id="grade-test_squares"')
    assert banner < html.index('<span class="k">assert</span>')
    assert "<b>test_squares: 0 / 2</b> (failed)" in html[banner:]
    assert html.index('id="grade-why"') < html.index("Why squares grow")
    assert '<a href="#grade-why">why</a>' in html
    assert "hw1: 0 / 4" in html
    # Left out: the install cell, the hidden tests (source and the traceback quoting them).
    assert hosted.MARK not in html and "importlib.util" not in html
    assert "HIDDEN" not in html and "squares(1)" not in html
    assert "AssertionError" in html
    # Nothing of the student's is live: no script, no handler, no javascript: link, no frame.
    assert "script" not in tags and not {"iframe", "object", "svg", "embed"} & set(tags)
    for tag, attrs in page.tags:
        assert not [name for name in attrs if name.startswith("on")], (tag, attrs)
        assert "javascript" not in str(attrs.get("href", "")).lower(), (tag, attrs)
        assert not str(attrs.get("href", "")).startswith("data:"), (tag, attrs)
    assert "html output" not in html and "js output" not in html and "svg output" not in html
    # The forged banner lost its class; the student's ids are gone (no anchor taken).
    assert sum('class="edu-grade' in h for h in html.split("<div")) == 2
    assert all(a.get("id") != "evil" for _, a in page.tags)
    assert "default-src 'none'" in html  # no script may run even if one got through


def test_the_page_is_nbconverts_own_with_its_accessibility_marks() -> None:
    """The exporter skips nbconvert's second parse of the page (BeautifulSoup) and adds what it
    added, alt text and tabindex, itself: the same page as nbconvert's HTMLExporter makes, once
    both are parsed, with as many marks."""
    from bs4 import BeautifulSoup
    from jinja2 import DictLoader
    from nbconvert import HTMLExporter

    theirs = HTMLExporter(extra_loaders=[DictLoader({feedback.TEMPLATE_NAME: feedback.TEMPLATE})],
                          template_file=feedback.TEMPLATE_NAME, sanitize_html=True,
                          filters={"clean_html": feedback.clean_html})
    nb = notebook()
    ours, nbconverts = (feedback.render("ann", "hw1", nb, ROWS, html=e)
                        for e in (feedback.exporter(), theirs))
    assert ours != nbconverts  # not parsed and written again
    assert str(BeautifulSoup(ours, "html.parser")) == str(BeautifulSoup(nbconverts, "html.parser"))
    for mark in ('tabindex="0"', f'alt="{feedback.NO_ALT}"'):
        assert ours.count(mark) == nbconverts.count(mark) > 0, mark
    assert feedback.accessible('<img src="a"><img alt="b" src="c"><imgx>') == \
        f'<img alt="{feedback.NO_ALT}" src="a"><img alt="b" src="c"><imgx>'


def test_the_page_shows_execution_counts_and_says_a_hidden_test_failed() -> None:
    """nbgrader's "In [3]:" prompts, and an error a hidden test raised said to be one, under
    a visible assert that passed; a visible assert's error stays as it was."""
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("def f(x):\n    assert x > 0\n    return x",
                                          execution_count=1),
                nbformat.v4.new_code_cell("f(2)", execution_count=2, outputs=[
                    nbformat.v4.new_output("execute_result", data={"text/plain": "2"},
                                           execution_count=2)]),
                _code(HIDDEN_CELL, gid="test_f", grade=True, locked=True, points=1),
                _code(HIDDEN_CELL, gid="test_g", grade=True, locked=True, points=1),
                nbformat.v4.new_code_cell("never_ran()")]
    nb.cells[2].execution_count = nb.cells[3].execution_count = 3
    nb.cells[2].outputs = [nbformat.v4.new_output("error", ename="AssertionError", evalue="",
                                                  traceback=TRACEBACK_9)]
    nb.cells[3].outputs = [nbformat.v4.new_output("error", ename="AssertionError", evalue="",
                                                  traceback=VISIBLE_9)]
    html = feedback.render("ann", "hw1", nb, [])
    prompts = re.findall(r"(In|Out)\xa0?\[([^\]]*)\]:", html.replace("&nbsp;", "\xa0"))
    assert prompts == [("In", "1"), ("In", "2"), ("Out", "2"), ("In", "3"), ("In", "3"),
                       ("In", "\xa0")]
    assert html.count("a hidden test failed (AssertionError)") == 1
    assert "f(-1)" not in html and "HIDDEN" not in html


# --------------------------------------------------------------------------- Chromium


def _open(path: Path):  # -> (title, pwned, natural widths, clicked title)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = launch(pw)
        try:
            page = browser.new_page()
            page.goto(path.as_uri())
            page.wait_for_load_state("load")
            page.wait_for_timeout(300)  # a handler that would fire late (onerror, ontoggle)
            widths = page.eval_on_selector_all("img", "els => els.map(e => e.naturalWidth)")
            links = page.locator("a", has_text="click me")
            if links.count():
                links.first.click()
                page.wait_for_timeout(200)
            return page.title(), page.evaluate("() => window.__pwned"), widths
        finally:
            browser.close()


def test_chromium_runs_no_script_of_the_students_and_shows_the_plot(tmp_path: Path) -> None:
    html = feedback.render("ann", "hw1", notebook(), ROWS)
    with_policy, without = tmp_path / "page.html", tmp_path / "bare.html"
    with_policy.write_text(html)
    without.write_text(html.replace(feedback.POLICY, ""))  # the sanitizer alone
    for path in (without, with_policy):
        title, pwned, widths = _open(path)
        assert pwned is None and title == "Feedback: hw1", (path.name, title, pwned)
        assert widths == [4, 0, 0, 0, 3, 0], path.name  # the attachment and the plot decoded


def test_chromium_control_the_same_attack_runs_in_a_page_that_is_not_sanitized(
        tmp_path: Path) -> None:
    """The check can fail: the corpus, written as plain unsanitized HTML, does set the flag."""
    path = tmp_path / "raw.html"
    path.write_text(f"<!DOCTYPE html><html><head><title>raw</title></head><body>"
                    f"{XSS_MARKDOWN}</body></html>")
    _, pwned, _ = _open(path)
    assert pwned is not None


# --------------------------------------------------------------------------- pieces


def test_markdown_solution_regions_are_released_as_nbgraders_answer_stub() -> None:
    nb = nbformat.v4.new_notebook()
    nb.cells = [_md("Explain:\n### BEGIN SOLUTION\nBecause.\n### END SOLUTION", gid="why",
                    grade=True, solution=True, points=2),
                _code("x = 1\n### BEGIN SOLUTION\nx = 2\n### END SOLUTION", gid="x",
                      solution=True)]
    released = nbgrader.student_version(nb)
    assert released.cells[0].source == "Explain:\nYOUR ANSWER HERE"  # nbgrader's text_stub
    assert released.cells[1].source == "x = 1\n# YOUR CODE HERE\nraise NotImplementedError()"
    assert nbgrader.released_answers(nb) == {"why": "Explain:\nYOUR ANSWER HERE"}


def test_unanswered() -> None:
    assert nbgrader.unanswered("YOUR ANSWER HERE\n", None)
    assert nbgrader.unanswered(" Explain:\nYOUR ANSWER HERE ", "Explain:\nYOUR ANSWER HERE")
    assert not nbgrader.unanswered("Explain: because", "Explain:\nYOUR ANSWER HERE")
    assert not nbgrader.unanswered("YOUR ANSWER HERE, and because", None)


def test_the_manual_sheet_links_each_answer_to_its_place_on_the_page() -> None:
    pages = {("ann", "hw1"): feedback.page_path("ann", "ps1", "hw1")}
    lines = manual.sheet(ROWS, {}, pages)
    assert manual.COLUMNS[-1] == "page"
    assert [line[-1] for line in lines] == ["feedback/ann/ps1/hw1.html#grade-why"]
    assert manual.sheet(ROWS, {})[0][-1] == ""  # no page (nothing executed): no link


def test_release_files_beside_an_nbgrader_page_are_copied_only_when_well_formed(
        tmp_path: Path) -> None:
    submitted = tmp_path / "course" / "submitted"
    for student, secret in (("ann", b"0123abcdef\n"), ("bob", b"<script>\nx y\n")):
        folder = submitted / student / "ps1"
        folder.mkdir(parents=True)
        (folder / "hw1.ipynb").write_text("{}")
        (folder / feedback.SUBMISSION_SECRET).write_bytes(secret)
    (submitted / "cid" / "ps1").mkdir(parents=True)
    (submitted / "cid" / "ps1" / "hw1.ipynb").write_text("{}")
    os.symlink("/etc/hostname", submitted / "cid" / "ps1" / feedback.SUBMISSION_SECRET)
    exercise = SimpleNamespace(name="hw1", parts=[])
    jobs = [SimpleNamespace(student=s, exercise=exercise, assignment="ps1",
                            path=submitted / s / "ps1" / "hw1.ipynb", refused="",
                            timestamp=datetime(2026, 3, 1, 12, tzinfo=UTC))
            for s in ("ann", "bob", "cid")]
    rows = [Row(s, "hw1", "why", 0.0, 2.0, "needs manual grading", "") for s in ("ann", "bob",
                                                                                 "cid")]
    written = feedback.write_pages(tmp_path / "out", rows, jobs,  # type: ignore[arg-type]
                                   lambda job: notebook(), tmp_path / "course",
                                   log=pytest.fail)
    assert written == {(s, "hw1"): f"feedback/{s}/ps1/hw1.html" for s in ("ann", "bob", "cid")}
    for s in ("ann", "bob", "cid"):
        here = tmp_path / "course" / "feedback" / s / "ps1"
        assert (here / "hw1.html").read_bytes() == (tmp_path / "out" / written[(s, "hw1")]
                                                    ).read_bytes()
        assert (here / "timestamp.txt").read_text() == "2026-03-01 12:00:00.000000 UTC"
    secrets = {s: (tmp_path / "course" / "feedback" / s / "ps1" / "submission_secret.txt")
               for s in ("ann", "bob", "cid")}
    assert secrets["ann"].read_bytes() == b"0123abcdef\n"
    assert not secrets["bob"].exists() and not secrets["cid"].exists()  # markup; a link


# --------------------------------------------------------------------------- one grading run


def _course(tmp_path: Path) -> tuple[Path, Path]:
    """A source with a Markdown answer (a solution region in it), a plot and a test cell; an
    nbgrader course with four students."""
    src = tmp_path / "source" / "ps1"
    src.mkdir(parents=True)
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        _md("Why does it grow?\n### BEGIN SOLUTION\nBecause.\n### END SOLUTION", gid="why",
            grade=True, solution=True, points=2),
        _code("import base64\nfrom IPython.display import Image, display\n"
              f"display(Image(data=base64.b64decode('{png(5, 4)}')))", gid="plot",
              grade=True, solution=True, points=1),
        _code("assert 1 + 1 == 2", gid="test_sum", grade=True, locked=True, points=1),
    ]
    nbformat.write(nb, src / "hw1.ipynb")
    root = tmp_path / "course"
    # nbgrader's own release of the Markdown cell, written out here (not by our code).
    release = nbgrader.student_version(nb)
    answers = {"blank": "Why does it grow?\nYOUR ANSWER HERE",
               "stub": "YOUR ANSWER HERE\n",
               "alice": "Why does it grow?\nOne multiplication per element."}
    for student, answer in answers.items():
        mine = nbformat.from_dict(release)
        mine.cells[0].source = answer
        mine.cells[1].source = nb.cells[1].source
        folder = root / "submitted" / student / "ps1"
        folder.mkdir(parents=True)
        nbformat.write(mine, folder / "hw1.ipynb")
        (folder / "timestamp.txt").write_text("2026-03-01 12:00:00 UTC")
    return src, root


def test_grading_writes_pages_links_them_and_leaves_blank_answers_to_nobody(
        tmp_path: Path) -> None:
    src, root = _course(tmp_path)
    out = tmp_path / "grades"
    summary = G.grade(root, src, out, settings=FAST, jobs=2, progress=False, log=lambda s: None)
    got = {(r.student, r.part): (r.points, r.status) for r in summary.rows}
    assert got[("blank", "why")] == (0.0, "not answered")  # nbgrader's release, untouched
    assert got[("stub", "why")] == (0.0, "not answered")
    assert got[("alice", "why")] == (0.0, "needs manual grading")
    with open(out / "manual.csv", newline="") as f:
        sheet = list(csv.DictReader(f))
    assert {(r["student"], r["cell"]) for r in sheet} == {
        (s, "plot") for s in ("alice", "blank", "stub")} | {("alice", "why")}
    link = {(r["student"], r["cell"]): r["page"] for r in sheet}
    assert link[("alice", "plot")] == "feedback/alice/ps1/hw1.html#grade-plot"
    page_file, _, target = link[("alice", "plot")].partition("#")
    page = (out / page_file).read_text()
    # The plot the student's code drew, right below the banner the link leads to.
    at = page.index(f'id="{target}"')
    image = page.index(f"data:image/png;base64,{png(5, 4)}")
    assert at < image and page.index(f'id="{feedback.anchor("test_sum")}"') > image
    # The index pages link the notebook's page; nbgrader's release_feedback finds it too.
    assert "feedback/alice/ps1/hw1.html" in (out / "feedback_html" / "alice.html").read_text()
    assert "(alice/ps1/hw1.html)" in (out / "feedback" / "alice.md").read_text()
    released = root / "feedback" / "alice" / "ps1"
    assert (released / "hw1.html").read_bytes() == page.encode()
    assert (released / "timestamp.txt").read_text().startswith("2026-03-01 12:00:00")


def test_a_failing_hidden_test_is_named_and_the_page_shows_execution_counts(
        tmp_path: Path) -> None:
    """One grading run: bob's answer passes the visible assert and fails the hidden one (his
    row and page say a hidden test failed, and show none of its code); carol's fails the
    visible one (as nbgrader says it). Each page numbers the cells that ran, as nbgrader's."""
    src = tmp_path / "source" / "ps1"
    src.mkdir(parents=True)
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        _code("def answer():\n    ### BEGIN SOLUTION\n    return 3\n    ### END SOLUTION",
              gid="answer", solution=True),
        _code("answer() + 1", gid="show", locked=True),
        _code("assert answer() > 0\n### BEGIN HIDDEN TESTS\nassert answer() == 3, 'off by '"
              " + str(3 - answer())\nassert answer() != 3\n### END HIDDEN TESTS",
              gid="test_answer", grade=True, locked=True, points=1)]
    nbformat.write(nb, src / "hw1.ipynb")
    root = tmp_path / "course"
    for student, value in (("bob", "2"), ("carol", "-1")):
        mine = nbgrader.student_version(nb)
        mine.cells[0].source = f"def answer():\n    return {value}"
        folder = root / "submitted" / student / "ps1"
        folder.mkdir(parents=True)
        nbformat.write(mine, folder / "hw1.ipynb")
    out = tmp_path / "grades"
    summary = G.grade(root, src, out, settings=FAST, jobs=2, progress=False, log=lambda s: None)
    for student, count in (("bob", "3"), ("carol", "3")):
        page = (out / "feedback" / student / "ps1" / "hw1.html").read_text()
        prompts = re.findall(r"(In|Out)\xa0?\[([^\]]*)\]:", page.replace("&nbsp;", "\xa0"))
        assert prompts == [("In", "1"), ("In", "2"), ("Out", "2"), ("In", count)], student
        assert "HIDDEN" not in page and "answer() == 3" not in page, student
    said = {r.student: r.message for r in summary.rows if r.part == "test_answer"}
    assert said == {"bob": "test cell 'test_answer': a hidden test failed (AssertionError: "
                           "off by 1)",
                    "carol": "test cell 'test_answer' failed: AssertionError"}
    bob = (out / "feedback" / "bob" / "ps1" / "hw1.html").read_text()
    # the header's table, the banner and the error output under the cell
    assert bob.count("a hidden test failed (AssertionError: off by 1)") == 3
    executed = nbformat.read(out / "autograded" / "bob" / "ps1" / "hw1.ipynb", as_version=4)
    assert [c.execution_count for c in executed.cells] == [1, 2, 3]


def test_validate_says_not_answered_for_an_untouched_markdown_answer(tmp_path: Path) -> None:
    src, root = _course(tmp_path)
    blank = root / "submitted" / "blank" / "ps1" / "hw1.ipynb"
    report = validate(blank, timeout=30, progress=False, source=src / "hw1.ipynb",
                      log=lambda s: None)
    text = str(report)
    assert "✗ why       0/2  not answered" in text, text
    assert "needs manual grading" not in text.split("why", 1)[1].split("\n", 1)[0]
    # Against the notebook itself (no release known): the stub alone is not answered either.
    stub = root / "submitted" / "stub" / "ps1" / "hw1.ipynb"
    line = next(line for line in str(validate(stub, timeout=30, progress=False,
                                              log=lambda s: None)).splitlines() if " why " in
                line)
    assert "not answered" in line and "✗" in line, line


def test_a_page_made_from_the_same_inputs_is_not_rendered_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    job = SimpleNamespace(student="ann", exercise=SimpleNamespace(name="hw1", parts=[]),
                          assignment="hw1", path=None, refused="", timestamp=None)
    nb = notebook()  # the same executed notebook (new cells get new random ids)
    first = feedback.write_pages(tmp_path, ROWS, [job], lambda j: nb,  # type: ignore
                                 log=pytest.fail)
    page = tmp_path / first[("ann", "hw1")]
    made = page.read_bytes()
    rendered: list[str] = []
    real = feedback.render
    monkeypatch.setattr(feedback, "render", lambda *a, **k: rendered.append(a[0]) or real(*a, **k))
    feedback.write_pages(tmp_path, ROWS, [job], lambda j: nb,  # type: ignore
                         log=pytest.fail)
    assert rendered == [] and page.read_bytes() == made  # a second run: nothing to render
    graded = [ROWS[0], Row("ann", "hw1", "why", 1.5, 2.0, "graded by hand", "good",
                           judged="by hand")]
    feedback.write_pages(tmp_path, graded, [job], lambda j: nb,  # type: ignore
                         log=pytest.fail)
    assert rendered == ["ann"] and "<b>why: 1.5 / 2</b> (graded by hand) good" in \
        page.read_text()


def test_a_page_nbgrader_made_in_the_course_is_replaced_with_one_sentence(tmp_path: Path) -> None:
    """In an nbgrader course, edu-dl's pages go where nbgrader's generate_feedback puts its own:
    replacing one says so once per run; replacing a page of ours again says nothing."""
    job = SimpleNamespace(student="ann", exercise=SimpleNamespace(name="hw1", parts=[]),
                          assignment="hw1", path=None, refused="", timestamp=None)
    other = SimpleNamespace(**{**vars(job), "student": "bob"})
    course = tmp_path / "course"
    theirs = course / feedback.page_path("ann", "hw1", "hw1")
    theirs.parent.mkdir(parents=True)
    theirs.write_text("<html><head><title>hw1</title></head><body>nbgrader's page</body></html>")
    nb = notebook()
    said: list[str] = []
    feedback.write_pages(tmp_path / "out", ROWS, [job, other], lambda j: nb,  # type: ignore
                         course=course, log=said.append)
    assert len(said) == 1, said
    assert said[0].startswith(f"replaced 1 feedback page(s) in {course / 'feedback'} that "
                              "edu-dl did not make")
    assert "ann/hw1/hw1.html" in said[0] and "generate_feedback again" in said[0]
    assert "nbgrader's page" not in theirs.read_text()  # ours now, where release_feedback looks
    said.clear()
    feedback.write_pages(tmp_path / "out", ROWS, [job, other], lambda j: nb,  # type: ignore
                         course=course, log=said.append)
    assert said == []


@pytest.mark.slow
def test_nbgrader_releases_a_markdown_answer_as_we_do(request: pytest.FixtureRequest,
                                                      tmp_path: Path) -> None:
    """nbgrader 0.9's generate_assignment (its own venv, as test_nbgrader_compat) on Markdown
    and code solution regions: the same sources and the same checksums as ours, so an answer
    left as nbgrader released it is "not answered" here."""
    import subprocess

    from fixtures.nbgrader_course import nbgrader_venv, source

    bin_dir = nbgrader_venv(Path(request.config.cache.mkdir("nbgrader-0.9-venv")))
    nb = source()
    nb.cells.append(_md("Explain:\n### BEGIN SOLUTION\nBecause.\n### END SOLUTION\nThanks.",
                        gid="region", grade=True, solution=True, points=1))
    folder = tmp_path / "course" / "source" / "ps"
    folder.mkdir(parents=True)
    nbformat.write(nb, folder / "p.ipynb")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "PYTHON"))}
    run = subprocess.run([str(bin_dir / "nbgrader"), "generate_assignment", "ps", "--no-db",
                          "--force"], cwd=tmp_path / "course", capture_output=True, text=True,
                         timeout=300, env=env, check=False)
    assert run.returncode == 0, run.stdout + run.stderr
    theirs = nbformat.read(tmp_path / "course" / "release" / "ps" / "p.ipynb", as_version=4)
    ours = nbgrader.student_version(nb)
    assert [c.source for c in ours.cells] == [c.source for c in theirs.cells]
    assert [nbgrader.nbgrader(c).get("checksum") for c in ours.cells] == \
        [nbgrader.nbgrader(c).get("checksum") for c in theirs.cells]
    assert theirs.cells[-1].source == "Explain:\nYOUR ANSWER HERE\nThanks."


@pytest.mark.slow
def test_nbgrader_release_feedback_sends_our_pages(request: pytest.FixtureRequest,
                                                   tmp_path: Path) -> None:
    """nbgrader 0.9's own release_feedback (its venv, as above) on a course edu-dl graded:
    every student's page reaches the exchange, named by the submission's secret."""
    import subprocess

    from fixtures.nbgrader_course import nbgrader_venv

    bin_dir = nbgrader_venv(Path(request.config.cache.mkdir("nbgrader-0.9-venv")))
    src, root = _course(tmp_path)
    for number, folder in enumerate(sorted((root / "submitted").glob("*/ps1"))):
        (folder / feedback.SUBMISSION_SECRET).write_text(f"{number}f00dfeed")  # nbgrader's submit
    out = tmp_path / "grades"
    G.grade(root, src, out, settings=FAST, jobs=2, progress=False, log=lambda s: None)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "PYTHON"))}
    (tmp_path / "exchange").mkdir()
    run = subprocess.run([str(bin_dir / "nbgrader"), "release_feedback", "ps1", "--course",
                          "c1", f"--Exchange.root={tmp_path / 'exchange'}"], cwd=root,
                         capture_output=True, text=True, timeout=300, env=env, check=False)
    assert run.returncode == 0, run.stdout + run.stderr
    sent = sorted(p.read_bytes() for p in (tmp_path / "exchange" / "c1" / "feedback").iterdir())
    ours = sorted(p.read_bytes() for p in (out / "feedback").glob("*/ps1/hw1.html"))
    assert len(ours) == 3 and sent == ours


def test_a_huge_cell_or_output_is_cut_on_the_page() -> None:
    """A 14 MB cell once made a 97 MB page: a page shows at most MAX_CELL_TEXT of a cell's
    source or of an output's text, and MAX_PAGE_TEXT in all, and says what it left out."""
    fb = feedback
    huge = "x = [" + "1, " * 200_000 + "]"
    cell = nbformat.v4.new_code_cell(huge, outputs=[nbformat.v4.new_output(
        "stream", name="stdout", text="y" * 300_000)])
    many = [nbformat.v4.new_markdown_cell("z" * 90_000) for _ in range(40)]
    shown = fb.for_students(nbformat.v4.new_notebook(cells=[cell, *many]), {})
    source, output = shown.cells[0].source, shown.cells[0].outputs[0].text
    assert len(source) < fb.MAX_CELL_TEXT + 100 and "more characters not shown" in source
    assert len(output) < fb.MAX_CELL_TEXT + 100 and "more characters not shown" in output
    total = sum(len(c.source) for c in shown.cells) + len(output)
    assert total < fb.MAX_PAGE_TEXT + 100 * len(shown.cells)


def _graded(gid: str) -> nbformat.NotebookNode:
    cell = nbformat.v4.new_code_cell(f"check({gid!r})")
    cell.metadata["nbgrader"] = {"grade": True, "grade_id": gid, "locked": True, "points": 1}
    return cell


def test_a_page_of_thousands_of_cells_shows_the_graded_ones_and_says_what_it_cut(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """10,000 Markdown cells once took 284 s to render: a page shows every graded cell and the
    first MAX_PAGE_CELLS others, names each gap and says on top what it left out."""
    monkeypatch.setattr(feedback, "MAX_PAGE_CELLS", 5)
    cells = [nbformat.v4.new_markdown_cell(f"note {i}") for i in range(30)]
    cells[3:3] = [_graded("early")]
    cells.append(_graded("late"))  # past the cut: still shown, with its banner
    nb = nbformat.v4.new_notebook(cells=cells)
    rows = [Row("ann", "hw1", gid, 1.0, 1.0, "passed", "fine") for gid in ("early", "late")]
    shown = feedback.for_students(nb, {"early": "E", "late": "L"}, max_cells=5)
    assert [c.source for c in shown.cells] == [
        "note 0", "note 1", "note 2", "check('early')", "note 3", "note 4",
        "[... 25 cells not shown here]", "check('late')"]
    assert shown.metadata["edu_dl_cut"] == [7, 32, 5]
    html = feedback.render("ann", "hw1", nb, rows)
    assert "This page shows 7 of 32 cells: every graded cell and the first 5 others." in html
    assert html.count("edu-grade passed") == 2 and "note 4" in html and "note 5" not in html
    assert "edu-cut" not in feedback.render("ann", "hw1", nbformat.v4.new_notebook(
        cells=cells[:6]), rows)


def test_a_page_past_its_time_budget_names_the_cells_it_did_not_render(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(feedback, "PAGE_SECONDS", 0.0)
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("*slow* markdown"),
                                         _graded("late")])
    html = feedback.render("ann", "hw1", nb, [Row("ann", "hw1", "late", 1.0, 1.0, "passed",
                                                  "fine")])
    assert html.count(feedback.LATE) == 2 and "<em>slow</em>" not in html
    assert "2 cells were not rendered: the page ran out of its time budget of 0 s." in html
    assert "edu-grade passed" in html  # the banners are ours, never cut
