"""``edu-dl mark`` in Chromium: a tiny course graded once, three answers graded by hand with
the keyboard and the form, a reload that keeps them, and the next ``edu-dl grade --manual``
that merges them (rows "graded by hand" with those points in grades.csv).

Playwright drives /usr/bin/chromium as tests/notebooks/test_browser.py does; skipped only when
no Chromium can be found.
"""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

import nbformat
from fixtures.chromium import chromium, launch_kept
from fixtures.nbgrader_course import _code, _md
from test_mark import ROOT, start_mark, stop

from edu_dl.grading import nbgrader

FAST = ["--timeout", "30", "--memory", "2048"]


RUBRIC = [{"points": 1, "criterion": "names the <i>loop</i> over the elements"},
          {"points": 1, "criterion": "gives an example"}]


def _course(tmp_path: Path) -> tuple[Path, Path]:
    """A source with a Markdown answer (2 points) and a code answer (1 point); two students
    who answered both: four rows that need a person."""
    src = tmp_path / "source" / "ps1"
    src.mkdir(parents=True)
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        _md("Why does it grow?\n### BEGIN SOLUTION\nBecause.\n### END SOLUTION", gid="why",
            grade=True, solution=True, points=2),
        _code("def twice(x):\n    ### BEGIN SOLUTION\n    return 2 * x\n    ### END SOLUTION",
              gid="twice", grade=True, solution=True, points=1)]
    nb.cells[0].metadata["edu_dl"] = {"rubric": RUBRIC}
    nbformat.write(nb, src / "hw1.ipynb")
    root = tmp_path / "course"
    for student in ("ann", "ben"):
        mine = nbformat.from_dict(nbgrader.student_version(nb))
        assert "edu_dl" not in mine.cells[0].metadata  # the rubric stays with the source
        mine.cells[0].source = f"<b>{student}</b> says: one multiplication per element."
        # A rubric of the student's own is never read: the source's is the one shown.
        mine.cells[0].metadata["edu_dl"] = {"rubric": [{"points": 2, "criterion": "give 2"}]}
        mine.cells[1].source = "def twice(x):\n    return x + x"
        folder = root / "submitted" / student / "ps1"
        folder.mkdir(parents=True)
        nbformat.write(mine, folder / "hw1.ipynb")
    return src, root


def _grade(root: Path, src: Path, out: Path, *extra: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "edu_dl.cli", "--no-config", "grade",
                           str(root), "--source", str(src), "--out", str(out), *FAST,
                           *extra], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-4000:]


def test_three_answers_graded_in_the_browser_are_kept_and_merged(tmp_path: Path) -> None:
    chromium()  # skipped, saying why, without it
    from playwright.sync_api import expect, sync_playwright  # the dev extra installs it

    src, root = _course(tmp_path)
    out = tmp_path / "grades"
    _grade(root, src, out)
    with open(out / "manual.csv", newline="") as f:  # the rubric beside each answer to grade
        rubrics = {(r["student"], r["cell"]): r["rubric"] for r in csv.DictReader(f)}
    assert rubrics == {(s, cell): ("1 pt: names the <i>loop</i> over the elements | 1 pt: "
                                   "gives an example" if cell == "why" else "")
                       for s in ("ann", "ben") for cell in ("why", "twice")}
    sheet = tmp_path / "manual-filled.csv"
    server, base, token = start_mark(out, tmp_path / "mark.log", "--source", str(src))
    try:
        with sync_playwright() as pw:
            browser = launch_kept(pw, tmp_path / "chromium-profile")
            try:
                page = browser.new_page()
                page.set_default_timeout(60_000)
                page.goto(f"{base}/edu-dl-mark?token={token}")
                rows = page.locator("#rows tbody tr")
                expect(rows).to_have_count(4)
                heading = page.locator("#detail h2")
                expect(heading).to_have_text("ann \u2014 hw1 / why")
                # The answer rendered as on the feedback page (its <b> bold), in a sandboxed
                # frame; its text too (the <b> as text), the solution cell beside it.
                frame = page.frame_locator("iframe.answer")
                expect(frame.locator("b")).to_have_text("ann")
                expect(frame.locator("body")).to_contain_text("one multiplication per element")
                assert page.locator("iframe.answer").get_attribute("sandbox") == ""
                expect(page.locator("pre.answer")).to_have_text(
                    "<b>ann</b> says: one multiplication per element.")
                expect(page.locator("pre.solution")).to_contain_text("Because.")
                expect(page.locator("ul.rubric li")).to_have_text(  # as text: no <i> markup
                    ["1 point: names the <i>loop</i> over the elements",
                     "1 point: gives an example"])
                link = page.locator("#detail a")
                assert link.get_attribute("href") == "/edu-dl-mark/page/0#grade-why"
                # 1: the keyboard: g to the points, type, Enter saves.
                page.keyboard.press("g")
                page.keyboard.type("3")
                page.keyboard.press("Enter")
                expect(page.locator("#said")).to_have_text("ann/hw1/why: 3 points is outside "
                                                           "0..2")
                page.locator("#points").fill("1.5")
                page.locator("#comment").fill("right idea, no example")
                page.keyboard.press("Escape")
                page.keyboard.press("s")
                expect(page.locator("#said")).to_have_text("saved")
                # 2: j to the next row, the form's fields and its button.
                page.keyboard.press("j")
                expect(heading).to_have_text("ann \u2014 hw1 / twice")
                expect(page.frame_locator("iframe.answer").locator("span.k").first).to_have_text(
                    "def")  # highlighted
                page.locator("#points").fill("1")
                page.locator("#save").click()
                expect(page.locator("#said")).to_have_text("saved")
                # 3: k back, then u to the next row not graded yet (ben's why).
                page.keyboard.press("k")
                expect(heading).to_have_text("ann \u2014 hw1 / why")
                page.keyboard.press("u")
                expect(heading).to_have_text("ben \u2014 hw1 / why")
                page.locator("#points").fill("2")
                page.locator("#save").click()
                expect(page.locator("#said")).to_have_text("saved")
                # A reload reads them back from the sheet.
                page.reload()
                expect(rows).to_have_count(4)
                expect(page.locator("#rows tbody tr td:nth-child(7)")).to_have_text(
                    ["1.5", "1", "2", ""])
                expect(page.locator("#comment")).to_have_value("right idea, no example")
                page.screenshot(path=str(tmp_path / "mark.png"))
                # The feedback page the link leads to: the banner of the cell, under a policy.
                reply = page.goto(f"{base}/edu-dl-mark/page/0#grade-why")
                assert reply is not None and "sandbox" in reply.headers[
                    "content-security-policy"]
                expect(page.locator("#grade-why")).to_contain_text("why")
                # The answer's frame: the same renderer, under a policy that lets only this
                # page frame it, sandboxed.
                reply = page.goto(f"{base}/edu-dl-mark/answer/0")
                assert reply is not None
                policy = reply.headers["content-security-policy"]
                assert "sandbox" in policy and "frame-ancestors 'self'" in policy
                expect(page.locator("b")).to_have_text("ann")
            finally:
                browser.close()
    finally:
        stop(server)
    with open(sheet, newline="") as f:  # the sheet the saves wrote shows the rubric too
        assert {(r["student"], r["cell"]): r["rubric"] for r in csv.DictReader(f)} == rubrics
    _grade(root, src, out, "--manual", str(sheet))
    with open(out / "grades.csv", newline="") as f:
        got = {(r["student"], r["part"]): (r["points"], r["status"]) for r in csv.DictReader(f)}
    assert got[("ann", "why")] == ("1.5", "graded by hand")
    assert got[("ann", "twice")] == ("1.0", "graded by hand")
    assert got[("ben", "why")] == ("2.0", "graded by hand")
    assert got[("ben", "twice")] == ("0.0", "needs manual grading")
