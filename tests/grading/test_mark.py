"""``edu-dl mark``'s sheet: what a save writes and refuses, what a reload reads back, and that
an anonymous session never sends a name (the store directly, then the server over HTTP)."""

from __future__ import annotations

import csv
import json
import os
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import nbformat
import pytest
from fixtures.chromium import free_port
from fixtures.nbgrader_course import _code, _md
from test_feedback import png
from test_grade import assert_no_live_markup

from edu_dl.grading.model import BY_HAND, Exercise, Job, Row
from edu_dl.grading.stages.feedback import page_path
from edu_dl.grading.term import gradebook, manual
from edu_dl.grading.term.mark.answer import autograded_path
from edu_dl.grading.term.mark.store import Desk, MarkError, answer_page, feedback_page

ROOT = Path(__file__).resolve().parents[2]
NAMES = ("zelda.quux", "yorick.plum")
HW1 = Exercise("hw1", nbformat.v4.new_notebook(), "")


def _out(tmp_path: Path) -> Path:
    """A gradebook as edu-dl grade leaves it: per student, a graded answer (2 points) and a
    passed test cell (1 point), and a feedback page whose header names the student."""
    out = tmp_path / "out"
    for student in NAMES:
        rows = [Row(student, "hw1", "why", 0, 2, manual.NEEDS, "", judged=BY_HAND,
                    answer=f"<script>alert(1)</script> answer of {student}"),
                Row(student, "hw1", "test_sum", 1, 1, "passed", "test cell passed")]
        gradebook.write_entry(out, Job(student, HW1, None, "ps1"), rows, "k", "b", "s")
        page = out / page_path(student, "ps1", "hw1")
        page.parent.mkdir(parents=True, exist_ok=True)
        page.write_text(f'<html><body><div class="edu-header"><p>Feedback for {student}</p>'
                        '<table><tr><td>why</td></tr></table></div>'
                        '<div id="grade-why">a plot</div></body></html>')
    return out


def _sheet(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        assert tuple(reader.fieldnames or ()) == manual.COLUMNS
        return list(reader)


def test_a_save_writes_manual_csvs_format_and_a_new_desk_reads_it_back(tmp_path: Path) -> None:
    out = _out(tmp_path)
    sheet = tmp_path / "filled.csv"
    desk = Desk(out, sheet)
    assert [(r["student"], r["cell"], r["status"]) for r in desk.listing()] == [
        (NAMES[1], "why", manual.NEEDS), (NAMES[0], "why", manual.NEEDS)]  # the book's order
    saved = desk.save(0, "1.5", " clear, one step missing ")
    assert (saved["points"], saved["comment"], saved["status"]) == (1.5, "clear, one step "
                                                                    "missing", manual.GRADED)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp file left
    lines = _sheet(sheet)
    assert [(r["student"], r["points"], r["comment"]) for r in lines] == [
        (NAMES[1], "1.5", "clear, one step missing"), (NAMES[0], "", "")]
    assert lines[0]["page"] == f"out/{page_path(NAMES[1], 'ps1', 'hw1')}#grade-why"
    assert os.stat(sheet).st_mode & 0o777 == 0o600
    again = Desk(out, sheet)  # a restart
    assert [(r["points"], r["graded"]) for r in again.listing()] == [(1.5, True), (None, False)]
    # What edu-dl grade --manual does with it: the row graded by hand, with those points.
    rows = [r for e in gradebook.read_entries(out, print).values() for r in e.rows]
    assert manual.merge(rows, manual.read_sheet(sheet), sheet) == 1
    assert [(r.student, r.points, r.status) for r in rows if r.part == "why"] == [
        (NAMES[1], 1.5, manual.GRADED), (NAMES[0], 0, manual.NEEDS)]
    desk.save(0, "", "")  # blank points: taken back
    assert [r["points"] for r in _sheet(sheet)] == ["", ""]


@pytest.mark.parametrize(("points", "said"), [("3", "3 points is outside 0..2"),
                                              ("-1", "-1 points is outside 0..2"),
                                              ("two", "points 'two' is not a number"),
                                              ("nan", "points 'nan' is not a number")])
def test_points_outside_the_row_or_not_a_number_are_refused_and_nothing_is_written(
        tmp_path: Path, points: str, said: str) -> None:
    desk = Desk(_out(tmp_path), tmp_path / "filled.csv")
    with pytest.raises(MarkError, match=re.escape(f"{NAMES[1]}/hw1/why: {said}")):
        desk.save(0, points, "")
    assert not (tmp_path / "filled.csv").exists()
    with pytest.raises(MarkError, match="there is no row 9"):
        desk.save(9, "1", "")


def test_an_autograded_row_is_listed_with_overrides_and_needs_a_reason(tmp_path: Path) -> None:
    out = _out(tmp_path)
    sheet = tmp_path / "filled.csv"
    assert len(Desk(out, sheet).items) == 2
    desk = Desk(out, sheet, overrides=True)
    cells = [(r["cell"], r["autograded"]) for r in desk.listing()]
    assert cells == [("why", False), ("test_sum", True)] * 2
    with pytest.raises(MarkError, match="an override needs a reason"):
        desk.save(1, "0", "  ")
    assert not sheet.exists()
    saved = desk.save(1, "0", "copied from the solution")
    assert (saved["status"], saved["points"]) == (manual.OVERRIDDEN, 0)
    line = [r for r in _sheet(sheet) if r["cell"] == "test_sum"]
    assert [(r["student"], r["points"], r["comment"]) for r in line] == [
        (NAMES[1], "0", "copied from the solution")]
    # Without --overrides, the next session keeps the line (and says nothing of it).
    Desk(out, sheet).save(0, "2", "")
    assert [r["cell"] for r in _sheet(sheet) if r["points"]] == ["why", "test_sum"]


def test_lines_the_session_does_not_know_stay_and_a_changed_answer_is_graded_again(
        tmp_path: Path) -> None:
    out = _out(tmp_path)
    sheet = tmp_path / "filled.csv"
    sheet.write_text("student,exercise,cell,answer_id,points,comment\n"
                     f"{NAMES[0]},hw1,why,id-0000000000000000,2,for the old answer\n"
                     "somebody,hw9,q1,,1,typed by hand\n")
    desk = Desk(out, sheet)
    old = desk.listing()[1]
    assert (old["points"], old["graded"]) == (None, False)
    assert "the answer changed since it was graded by hand (2 points" in old["note"]
    desk.save(0, "1", "")
    kept = {(r["student"], r["cell"]): (r["points"], r["comment"]) for r in _sheet(sheet)}
    assert kept[("somebody", "q1")] == ("1", "typed by hand")
    assert kept[(NAMES[0], "why")] == ("", "")  # as the next manual.csv would have it


def test_two_people_saving_at_once_lose_nothing(tmp_path: Path) -> None:
    """Two graders (two processes, two desks on one sheet) save their own rows 20 times each,
    at the same time: every save reads the sheet under the lock, so both last grades are kept."""
    import multiprocessing

    out, sheet = _out(tmp_path), tmp_path / "filled.csv"
    assert len(Desk(out, sheet).items) == 2

    def grader(index: int) -> None:
        desk = Desk(out, sheet)
        for k in range(20):
            desk.save(index, str(k % 3), f"grader {index}, save {k}")

    workers = [multiprocessing.get_context("fork").Process(target=grader, args=(i,))
               for i in (0, 1)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(60)
        assert w.exitcode == 0
    lines = {line["student"]: line for line in _sheet(sheet)}
    kept = {(line["points"], line["comment"]) for line in lines.values()}
    assert kept == {("1", "grader 0, save 19"), ("1", "grader 1, save 19")}, lines


def test_a_sheet_that_cannot_be_read_is_said_with_its_line(tmp_path: Path) -> None:
    sheet = tmp_path / "filled.csv"
    sheet.write_text("student,exercise,cell,points\na,hw1,why,lots\n")
    with pytest.raises(manual.ManualSheetError, match="line 2: points 'lots' is not a number"):
        Desk(_out(tmp_path), sheet).listing()


def test_anonymous_rows_and_pages_never_carry_a_name(tmp_path: Path) -> None:
    out = _out(tmp_path)
    desk = Desk(out, tmp_path / "filled.csv", anonymous=True, overrides=True)
    refused = []
    for index, points in ((0, "5"), (1, "0"), (0, "x")):
        with pytest.raises(MarkError) as caught:
            desk.save(index, points, "")
        refused.append(str(caught.value))
    assert refused[0] == "student 1/hw1/why: 5 points is outside 0..2"
    said = json.dumps([desk.listing(), *(desk.detail(i) for i in range(len(desk.items))),
                       desk.save(0, "1", "fine"), refused])
    # The answers name their students: shown with the pseudonym instead.
    assert "answer of student 1" in said and "answer of student 2" in said
    assert not any(name in said for name in NAMES)
    pages = [feedback_page(desk, i) for i in range(len(desk.items))]
    assert all(b'id="grade-why"' in p and b"Feedback for" not in p for p in pages)
    assert not any(name.encode() in p for name in NAMES for p in pages)
    named = out / page_path(NAMES[1], "ps1", "hw1")
    named.write_text(named.read_text() + f"<p>{NAMES[1]}</p>")
    with pytest.raises(MarkError, match="shows the student's name"):
        feedback_page(desk, 0)
    assert NAMES[1].encode() in feedback_page(Desk(out, tmp_path / "f.csv"), 0)


def _answered(tmp_path: Path, markdown: str, printed: str = "twice 2 is 4") -> Path:
    """OUT as grading leaves it for one student (NAMES[0]): in the gradebook a Markdown answer
    and a code answer to grade by hand, in autograded/ the executed notebook, whose code answer
    printed ``printed`` and drew a plot."""
    out = tmp_path / "out"
    student = NAMES[0]
    code = _code("def twice(x):\n    return x + x\nprint(twice(2))\nplot()", gid="twice",
                 grade=True, solution=True, points=1)
    code.execution_count = 3
    code.outputs = [nbformat.v4.new_output("stream", name="stdout", text=printed + "\n"),
                    nbformat.v4.new_output("display_data", data={"image/png": png(),
                                                                 "text/plain": "<Figure>"})]
    nb = nbformat.v4.new_notebook()
    nb.cells = [_md(markdown, gid="why", grade=True, solution=True, points=2), code]
    path = autograded_path(out, student, "ps1", "hw1")
    path.parent.mkdir(parents=True)
    nbformat.write(nb, path)
    rows = [Row(student, "hw1", "why", 0, 2, manual.NEEDS, "", judged=BY_HAND, answer=markdown),
            Row(student, "hw1", "twice", 0, 1, manual.NEEDS, "", judged=BY_HAND,
                answer=code.source)]
    gradebook.write_entry(out, Job(student, HW1, None, "ps1"), rows, "k", "b", "s")
    return out


ATTACK = ("A **bold** claim. <script>window.__pwned = 'script'</script>\n"
          "<img src=x onerror=\"window.__pwned = 'onerror'\"> "
          "<a href=\"javascript:alert(1)\">x</a>")


def test_an_answer_is_rendered_as_on_the_feedback_page_and_nothing_in_it_is_live(
        tmp_path: Path) -> None:
    desk = Desk(_answered(tmp_path, ATTACK), tmp_path / "filled.csv")
    why, twice = (desk.detail(i) for i in range(2))
    assert (why["cell"], why["rendered"], why["answer"]) == ("why", True, ATTACK)  # its text too
    page = answer_page(desk, 0).decode()
    assert "<strong>bold</strong>" in page  # Markdown rendered
    assert_no_live_markup(page)  # no script, no handler, no javascript: link
    assert "window.__pwned = 'onerror'" not in page and "javascript:" not in page
    assert 'http-equiv="Content-Security-Policy"' in page
    code = answer_page(desk, 1).decode()
    assert twice["rendered"] and '<span class="k">return</span>' in code  # highlighted
    assert "twice 2 is 4" in code and f"data:image/png;base64,{png()}" in code  # outputs, plot
    assert_no_live_markup(code)
    # A row without an executed notebook (an older OUT) shows its text only.
    old = Desk(_out(tmp_path / "old"), tmp_path / "old.csv")
    assert old.detail(0)["rendered"] is False
    with pytest.raises(MarkError, match="no executed notebook"):
        answer_page(old, 0)


def test_anonymous_hides_the_students_names_inside_the_answer(tmp_path: Path) -> None:
    signed = "Signed: ZELDA.QUUX (Zelda \n Quux, ZQ@example.org). With Zeldas help, quuxes"
    out = _answered(tmp_path, signed, printed="by Zelda.Quux")
    names = {NAMES[0]: ("Zelda", "Quux", "zq@example.org")}
    desk = Desk(out, tmp_path / "filled.csv", anonymous=True, names=names)
    assert desk.detail(0)["answer"] == ("Signed: student 1 (student 1, student 1). With Zeldas "
                                        "help, quuxes")  # whole words only
    page = answer_page(desk, 0).decode()
    assert "Signed: student 1 (student 1, student 1)" in page
    assert not any(form in page for form in ("ZELDA", "Quux", "ZQ@"))
    code = answer_page(desk, 1).decode()
    assert "by student 1" in code and "Zelda" not in code  # an output names them too
    # Without the roster's names, the id alone is replaced; not anonymous, nothing is.
    bare = Desk(out, tmp_path / "filled.csv", anonymous=True)
    assert bare.detail(0)["answer"].startswith("Signed: student 1 (Zelda \n Quux, ZQ@")
    assert Desk(out, tmp_path / "filled.csv").detail(0)["answer"] == signed
    # A name spelled so that only the rendered page shows it: the answer is not shown.
    entity = _answered(tmp_path / "entity", "by z&#101;lda.quux")
    with pytest.raises(MarkError, match="shows the student's name"):
        answer_page(Desk(entity, tmp_path / "e.csv", anonymous=True), 0)


# --------------------------------------------------------------------------- over HTTP


def start_mark(out: Path, log: Path, *args: str) -> tuple[subprocess.Popen[bytes], str, str]:
    """``edu-dl mark OUT`` in a process of its own; its base URL and token once it answers."""
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "JUPYTER_RUNTIME_DIR": str(log.parent /
                                                                            "runtime")}
    with open(log, "wb") as sink:
        server = subprocess.Popen([sys.executable, "-m", "edu_dl.cli", "--no-config", "mark",
                                   str(out), "--no-browser", "--port", str(port), *args],
                                  stdout=sink, stderr=subprocess.STDOUT, env=env)
    base = f"http://127.0.0.1:{port}"
    for _ in range(240):
        if server.poll() is not None:
            pytest.fail(f"edu-dl mark exited with {server.returncode}:\n{log.read_text()}")
        found = re.search(r"open (http://\S+)\?token=(\w+)", log.read_text())
        if found:
            assert found.group(1) == f"{base}/edu-dl-mark"
            try:
                urllib.request.urlopen(f"{base}/api/status?token={found.group(2)}",
                                       timeout=5).close()
                return server, base, found.group(2)
            except OSError:
                pass
        time.sleep(0.25)
    server.kill()
    pytest.fail(f"edu-dl mark did not answer:\n{log.read_text()}")


def stop(server: subprocess.Popen[bytes]) -> None:
    """Terminate the server (and wait for it)."""
    server.terminate()
    try:
        server.wait(timeout=20)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait()


def _get(url: str, token: str | None = None, data: bytes | None = None) -> tuple[int, bytes]:
    headers = {"Authorization": f"token {token}"} if token else {}
    request = urllib.request.Request(url, data=data, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as reply:
            return reply.status, reply.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def test_the_server_wants_its_token_checks_a_save_and_names_nobody_when_anonymous(
        tmp_path: Path) -> None:
    out = _out(tmp_path)
    server, base, token = start_mark(out, tmp_path / "mark.log", "--anonymous", "--overrides")
    try:
        app = f"{base}/edu-dl-mark"
        assert _get(f"{app}/api/rows")[0] == 403
        assert _get(f"{app}/api/rows/0", data=b'{"points": "1"}')[0] == 403
        assert _get(f"{base}/api/contents", token)[0] == 404  # no files served
        assert _get(f"{base}/api/kernels", token)[0] == 404  # no code run
        status, said = _get(f"{app}/api/rows/0", token, b'{"points": "5", "comment": ""}')
        assert (status, json.loads(said)["error"]) == (400, "student 1/hw1/why: 5 points is "
                                                            "outside 0..2")
        status, said = _get(f"{app}/api/rows/1", token, b'{"points": "0", "comment": ""}')
        assert status == 400 and "an override needs a reason" in json.loads(said)["error"]
        assert not (tmp_path / "manual-filled.csv").exists()
        assert _get(f"{app}/api/rows/0", token, b'{"points": 2, "comment": "ok"}')[0] == 200
        replies = [_get(f"{app}{path}", token) for path in (
            "", "/mark.js", "/api/rows", "/api/rows/0", "/api/rows/1", "/api/rows/2",
            "/api/rows/3", "/page/0", "/page/2")]
        assert [status for status, _ in replies] == [200] * len(replies)
        said = b"".join(body for _, body in replies)
        assert b"answer of student 2" in said
        assert not any(name.encode() in said for name in NAMES)
        assert [(r["student"], r["points"]) for r in _sheet(tmp_path / "manual-filled.csv")
                if r["points"]] == [(NAMES[1], "2")]
    finally:
        stop(server)


def test_the_sheet_and_source_default_to_the_course_configs(tmp_path: Path) -> None:
    from edu_dl.cli import build_parser
    from edu_dl.grading.term import config
    from edu_dl.grading.term.mark.store import default_sheet

    toml = tmp_path / "edu-dl.toml"
    toml.write_text('[grade]\nmanual = "sheets/filled.csv"\n[course]\nsource = "solutions"\n'
                    'db = "sqlite:////srv/course/gradebook.db"\n')
    argv = ["--config", str(toml), "mark", str(tmp_path / "out")]
    parser = build_parser()
    config.prepare(parser, argv)
    args = parser.parse_args(argv)
    assert args.sheet == tmp_path / "sheets" / "filled.csv"
    assert args.source == tmp_path / "solutions"
    assert args.db == "sqlite:////srv/course/gradebook.db"
    assert default_sheet(tmp_path / "out", None) == tmp_path / "manual-filled.csv"
