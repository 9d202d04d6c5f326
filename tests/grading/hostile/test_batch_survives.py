"""One hostile student never stops the batch, costs a neighbour a grade, or reaches a terminal, a
page or a CSV cell raw (issue 22). Run as root and as an ordinary user; every batch holds the
honest control ``alice`` with her exact score.
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import nbformat
import pytest
from fixtures.hostile import corpus
from fixtures.hostile.corpus import write

from edu_dl.cli import main
from edu_dl.grading import model, sandbox
from edu_dl.grading.settings import Settings
from edu_dl.grading.term import batch as G

FAST = Settings(timeout_s=20, budget_s=60, memory_mb=2048)
GROUP = f"survives{os.getpid()}-"
ESC = "\x1b]0;pwned\x07\x1b[2J\x1b[H ALL STUDENTS PASSED \x1b[8m"
RAW_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f]")

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def _own_sandbox_group(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(sandbox.GROUP_VAR, GROUP)


def raising(message: str) -> nbformat.NotebookNode:
    """A student whose gflops raises ``message`` (peak_bandwidth stays right)."""
    nb = corpus.student()
    corpus._replace("gflops", "return 2.0 * n**3 / seconds / 1e9",
                    f"raise ValueError({message!r})")(nb)
    return nb


def totals(summary: model.Summary) -> dict[str, float]:
    found: dict[str, float] = {}
    for row in summary.rows:
        found[row.student] = found.get(row.student, 0.0) + row.points
    return found


def crash_batch(root: Path) -> tuple[Path, Path]:
    """Every input that once stopped the batch, beside the honest alice; (submissions, source)."""
    subs, source = root / "submissions", root / "source"
    corpus.write_source(source, corpus.source())
    write(subs / "alice", corpus.student())
    write(subs / "surrogate", raising("\udcff lone surrogate"))
    write(subs / "markup", raising("<script>alert(1)</script><img src=x onerror=alert(2)> | x"))
    write(subs / "nul", raising("a\x00b\rc"))
    write(subs / "terminal", raising(ESC + "\x1b]52;c;cHduZWQ=\x07"))
    # A notebook whose name is not UTF-8, and a student folder whose name is not either.
    odd = subs / "bytes_name"
    odd.mkdir()
    (odd / "02_mini.ipynb").write_text(nbformat.writes(corpus.student()))
    with open(os.fsencode(odd) + b"/\xff\xfe.ipynb", "w") as f:
        f.write(nbformat.writes(corpus.student()))
    bad_folder = os.fsencode(subs) + b"/\xff-carol"
    os.mkdir(bad_folder)
    with open(bad_folder + b"/02_mini.ipynb", "w") as f:
        f.write(nbformat.writes(corpus.student()))
    write(subs / f"esc{ESC}", corpus.student(), f"02_mini{ESC}")
    # A timestamp past the last moment UTC can hold, with a due date and a late policy.
    write(subs / "late", corpus.student())
    (subs / "late" / "timestamp.txt").write_text("9999-12-31T23:59:59-23:59")
    return subs, source


def test_every_known_crash_input_beside_an_honest_control(tmp_path: Path,
                                                          capfd: pytest.CaptureFixture[str],
                                                          monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    monkeypatch.setenv("TQDM_DISABLE", "1")  # its bar's carriage returns are not the student's
    subs, source = crash_batch(tmp_path)
    out = tmp_path / "grades"
    argv = ["grade", str(subs), "--source", str(source), "--out", str(out), "--jobs", "2",
            "--timeout", "20", "--budget", "60", "--memory", "2048",
            "--due", "2026-03-01T12:00", "--late", "per-hour:1"]
    for again in ([], ["--force"], []):  # a rerun (cached rows), a forced one, and once more
        assert main(argv + again) == 0
        printed = capfd.readouterr()
        assert not RAW_CONTROL.search(printed.out + printed.err.replace("\r", "")), printed
    # One student regraded: every other row comes back from the kept state, byte for byte.
    books = {name: (out / name).read_bytes() for name in ("grades.csv", "nbgrader_grades.csv")}
    assert main([*argv, "--student", "alice", "--force"]) == 0
    assert books == {name: (out / name).read_bytes() for name in books}
    with open(out / "grades.csv", newline="", encoding="utf-8") as f:  # strict UTF-8
        rows = list(csv.DictReader(f))
    by = {(r["student"], r["part"]): r for r in rows}
    assert by[("alice", "ex02.gflops")]["points"] == "1.0"
    assert by[("alice", "ex02.peak_bandwidth")]["points"] == "1.0"
    assert sum(float(r["points"]) for r in rows if r["student"] == "alice") == 2.0
    assert by[("surrogate", "ex02.gflops")]["status"] == "failed"
    assert "\\xff lone surrogate" in by[("surrogate", "ex02.gflops")]["message"]
    assert by[("\\xff-carol", "ex02.gflops")]["status"] == "passed"  # graded, name escaped
    assert any(r["status"] == "not an exercise" and r["student"] == "bytes_name"
               and "\\xff\\xfe" in r["message"] for r in rows)
    late = by[("late", "late penalty")]
    assert late["status"] == "timestamp unreadable" and late["points"] == "0.0"
    for text in (Path(out / name).read_text("utf-8") for name in
                 ("grades.csv", "manual.csv", "nbgrader_grades.csv")):
        assert not RAW_CONTROL.search(text.replace("\r", "")), text
    students = {r["student"] for r in rows}
    feedback = sorted((out / "feedback").glob("*.md"))
    pages = sorted((out / "feedback_html").iterdir())
    assert len(feedback) == len(pages) == len(students) == 9, students
    notebooks = sorted((out / "feedback").glob("*/*/*.html"))  # the notebooks' own pages
    for page in notebooks:
        text = page.read_text("utf-8")
        assert "<script" not in text and not RAW_CONTROL.search(text.replace("\r", "")), page
    for page in feedback + pages:
        text = page.read_text("utf-8")
        assert "<script>" not in text and "<img" not in text, page
        assert not RAW_CONTROL.search(text.replace("\r", "")), page
    markdown = next(p for p in feedback if p.name.startswith("markup")).read_text()
    assert "&lt;script&gt;" in markdown and "\\|" in markdown
    assert not corpus.sandbox_processes(GROUP)


def test_a_local_cluster_survives_the_same_student(tmp_path: Path) -> None:
    pytest.importorskip("distributed")
    from edu_dl.grading.stages.cluster import ClusterOptions

    subs, source = tmp_path / "submissions", tmp_path / "source"
    corpus.write_source(source, corpus.source())
    write(subs / "alice", corpus.student())
    write(subs / "surrogate", raising("\udcff lone surrogate" + ESC))
    summary = G.grade(subs, source, tmp_path / "grades", settings=FAST, progress=False,
                      log=lambda text: None, cluster=ClusterOptions(local_workers=1))
    assert totals(summary) == {"alice": 2.0, "surrogate": 1.0}, summary.rows
    assert (tmp_path / "grades" / "feedback" / "surrogate.md").exists()


# --------------------------------------------------------------------------- forged results


def forged_result(executed: bytes, record: object) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as zf:
        zf.writestr("run.json", json.dumps(record))
        zf.writestr("executed.ipynb", executed)
    return buffer.getvalue()


def forged_notebooks(restored: nbformat.NotebookNode) -> dict[str, bytes]:
    """Executed notebooks a student's process could have written in place of the runner's."""
    def variant(edit: object) -> bytes:
        nb = nbformat.from_dict(json.loads(json.dumps(restored)))
        for cell in nb.cells:
            if cell.cell_type == "code":
                cell.outputs = []
        edit(nb)  # type: ignore[operator]
        return json.dumps(nb).encode()

    def text_list(nb: nbformat.NotebookNode) -> None:
        nb.cells[2]["outputs"] = [{"output_type": "execute_result", "execution_count": 1,
                                   "metadata": {}, "data": {"text/plain": [1, 2]}}]

    def outputs_object(nb: nbformat.NotebookNode) -> None:
        nb.cells[2]["outputs"] = {}

    def new_source(nb: nbformat.NotebookNode) -> None:
        nb.cells[2]["source"] = "print('FORGED SOURCE')"
        nb.cells[2]["outputs"] = [{"output_type": "stream", "name": "stdout",
                                   "text": "<script>alert(1)</script>"}]

    def deep(nb: nbformat.NotebookNode) -> None:
        nested: list[object] = []
        for _ in range(440):
            nested = [nested]
        nb.metadata["deep"] = nested

    return {"text_list": variant(text_list), "outputs_object": variant(outputs_object),
            "new_source": variant(new_source), "deep": variant(deep),
            "not_json": b"\xff\xfe{" * 1000}


def test_forged_results_cost_only_their_student(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """A sandbox that returns a forged result zip (as a process that took the runner's
    descriptor would): feedback and the nbgrader export are written for everyone, the control
    keeps her score, and what the instructor audits holds the restored sources."""
    subs, source, out = tmp_path / "submissions", tmp_path / "source", tmp_path / "grades"
    corpus.write_source(source, corpus.source())
    write(subs / "alice", corpus.student())
    restored = corpus.source()
    forgeries = forged_notebooks(restored)
    for name in forgeries:
        write(subs / name, corpus.student())
    real_run = sandbox.run

    def run(argv: list[str], **kw: object) -> sandbox.Result:
        notebook = kw["files"]["/tmp/work/notebook.ipynb"]  # type: ignore[index]
        student = next((n for n in forgeries if f"FORGE-{n}" in notebook.decode()), None)
        if student is None:
            return real_run(argv, **kw)  # type: ignore[arg-type]
        record = {"cells": [{"index": "x"}, {"grade_id": ["a"]}], "kernel": {"deep": [[[]]]},
                  "message": 7}
        data = forged_result(forgeries[student], record)
        return sandbox.Result(returncode=0, output=data, output_size=len(data))

    for name in forgeries:  # a marker in the student's own cell tells the fake sandbox who it is
        path = subs / name / f"{corpus.EXERCISE}.ipynb"
        nb = nbformat.read(path, as_version=4)
        corpus._prepend("gflops", f"# FORGE-{name}")(nb)
        nbformat.write(nb, path)
    monkeypatch.setattr(sandbox, "run", run)
    summary = G.grade(subs, source, out, settings=FAST, jobs=2, progress=False,
                      log=lambda text: None)
    got = totals(summary)
    assert got.pop("alice") == 2.0
    assert got == dict.fromkeys(forgeries, 0.0), summary.rows
    assert not [r for r in summary.rows if r.status == "grader error"], summary.rows
    for name in forgeries:
        assert (out / "feedback" / f"{name}.md").exists()
        page = "".join(p.read_text() for p in (out / "feedback" / name).glob("*/*.html"))
        assert "FORGED SOURCE" not in page and "<script" not in page
        audited = (out / "autograded" / name / corpus.EXERCISE / f"{corpus.EXERCISE}.ipynb")
        text = audited.read_text()
        assert "FORGED SOURCE" not in text and "FORGE-" + name in text  # the restored sources
        assert len(text) < 20_000  # the deep metadata was not written back
        run_json = json.loads((out / ".work" / name / corpus.EXERCISE / "run.json").read_text())
        assert run_json["record"]["cells"] == [] and run_json["record"]["kernel"] == ""
    assert (out / "nbgrader_grades.csv").exists()


# --------------------------------------------------------------------------- layouts


def test_a_nested_copy_is_never_graded_in_nbgrader_layout(tmp_path: Path) -> None:
    """The review's late-penalty bypass: submitted/<student>/<assignment>/0/ sorted first."""
    course = tmp_path / "course"
    corpus.write_source(course / "source" / "ps1", corpus.source())
    real = write(course / "submitted" / "alice" / "ps1", corpus.student())
    (real.parent / "timestamp.txt").write_text("2026-03-02 00:00:00 UTC")  # 12 h late
    cheat = write(course / "submitted" / "alice" / "ps1" / "0", corpus.student())
    (cheat.parent / "timestamp.txt").write_text("2026-03-01 00:00:00 UTC")
    write(course / "submitted" / "bob", corpus.student())  # not in an assignment folder
    from edu_dl.grading.term.policy import Dates, LatePolicy
    from edu_dl.grading.trust.files import parse_time

    summary = G.grade(course, course / "source" / "ps1", tmp_path / "grades", settings=FAST,
                      progress=False, log=lambda text: None,
                      dates=Dates(parse_time("2026-03-01T12:00"), LatePolicy.parse("zero")))
    rows = {(r.student, r.part): r for r in summary.rows}
    assert rows[("alice", "late penalty")].points == -2.0  # the real, late submission
    assert totals(summary)["alice"] == 0.0
    ignored = [r for r in summary.rows if r.status == "ignored"]
    assert {r.student for r in ignored} == {"alice", "bob"}, ignored
    assert any("alice/ps1/0/02_mini.ipynb" in r.message for r in ignored), ignored
    with open(tmp_path / "grades" / "nbgrader_grades.csv", newline="") as f:
        exported = {r["student_id"]: r for r in csv.DictReader(f)}
    assert exported["alice"]["assignment"] == "ps1"


def test_the_shallowest_copy_is_graded_in_the_flat_layout(tmp_path: Path) -> None:
    subs, source = tmp_path / "submissions", tmp_path / "source"
    corpus.write_source(source, corpus.source())
    wrong = corpus.student()
    corpus.WRONG(wrong)
    write(subs / "alice", corpus.student())
    write(subs / "mallory", wrong)
    write(subs / "mallory" / "0", corpus.student())  # sorts before 02_mini.ipynb
    summary = G.grade(subs, source, tmp_path / "grades", settings=FAST, progress=False,
                      log=lambda text: None)
    assert totals(summary) == {"alice": 2.0, "mallory": 1.0}, summary.rows
    note = next(r for r in summary.rows if r.status == "ignored")
    assert "mallory/0/02_mini.ipynb is another copy" in note.message


# --------------------------------------------------------------------------- private files


def test_dot_names_beside_the_source_reach_no_sandbox_and_no_release(tmp_path: Path) -> None:
    """A --source that is a git checkout: its history (the private part file in it) never
    reaches a sandbox or a student release, and both commands say what they left out."""
    subs, source, out = tmp_path / "submissions", tmp_path / "source", tmp_path / "grades"
    corpus.write_source(source, corpus.source())
    (source / "data.txt").write_text("shared data")
    (source / ".git").mkdir()
    (source / ".git" / "config").write_text("PRIVATE-GIT-TOKEN")
    (source / ".env").write_text("PRIVATE-ENV-TOKEN")
    write(subs / "alice", corpus.student())
    snoop = corpus.student()
    corpus._prepend("gflops", "import os\nprint(sorted(os.listdir('.')))\n"
                    "for p in ('.git/config', '.env'):\n"
                    "    try:\n        print(open(p).read())\n"
                    "    except OSError as exc:\n        print('no', p, exc.errno)")(snoop)
    write(subs / "snoop", snoop)
    said: list[str] = []
    summary = G.grade(subs, source, out, settings=FAST, progress=False, log=said.append)
    assert totals(summary) == {"alice": 2.0, "snoop": 2.0}, summary.rows
    assert any(".env, .git/" in line for line in said), said
    executed = (out / "autograded" / "snoop" / corpus.EXERCISE / f"{corpus.EXERCISE}.ipynb")
    text = executed.read_text()
    assert "['data.txt', 'notebook.ipynb']" in text and "PRIVATE" not in text
    release = tmp_path / "release"
    done = subprocess.run([sys.executable, "-m", "edu_dl.cli", "assign", str(source),
                           str(release), "--no-run-solutions"], capture_output=True, text=True,
                          check=True)
    assert "not released" in done.stdout and ".git/" in done.stdout, done.stdout
    assert sorted(p.name for p in release.iterdir()) == ["02_mini.ipynb", "data.txt", "parts"]


# --------------------------------------------------------------------------- amplification

SQUARE_PARTS = '''
from edu_dl.grading import Part
from edu_dl.grading.authoring.source import names_check


def _cases(rng, hidden):
    return [(int(n),) for n in rng.integers(1, 100, size=3)]


PARTS = [Part(id="hw9.square", points=1, cases=_cases, expected=lambda n: n * n,
              source_check=names_check(forbidden=[(("pow",), "square without pow")]))]
'''


def square_source(folder: Path) -> None:
    """A private exercise with a source-checked part: hw9.square."""
    (folder / "parts").mkdir(parents=True)
    (folder / "parts" / "hw9.py").write_text(SQUARE_PARTS)
    nb = nbformat.v4.new_notebook(cells=[
        corpus._code("from edu_dl.grading import check", gid="setup", locked=True),
        corpus._code("def square(n):\n    ### BEGIN SOLUTION\n    return n * n\n"
                     "    ### END SOLUTION", gid="square", solution=True),
        corpus._code('check("hw9.square", square)', gid="square_tests", grade=True,
                     locked=True, points=1)])
    nbformat.write(nb, folder / "hw9.ipynb")


def nested(depth: int) -> list[object]:
    value: list[object] = []
    for _ in range(depth):
        value = [value]
    return value


def test_amplification_attacks_stay_within_stated_bounds(tmp_path: Path) -> None:
    """Small submissions that once grew hundreds of times on the trusted side: the grades folder
    stays within twice what was submitted (plus a fixed 2 MB), each student's notebook kept for
    the instructor within 1.1 times theirs, the grader within 700 MB."""
    subs, source, out = tmp_path / "submissions", tmp_path / "source", tmp_path / "grades"
    square_source(source)
    honest = nbformat.read(source / "hw9.ipynb", as_version=4)
    write(subs / "alice", honest, "hw9")
    deep = nbformat.read(source / "hw9.ipynb", as_version=4)
    deep.cells[1].metadata["junk"] = [nested(440) for _ in range(1_000)]  # ~1 MB
    wide = nbformat.read(source / "hw9.ipynb", as_version=4)
    # ~0.5 MB, 250,000 JSON values: allowed (trust.notebook refuses over 500,000, unparsed)
    wide.cells[1].metadata["junk"] = [nested(50) for _ in range(5_000)]
    for name, nb in (("deep", deep), ("wide", wide)):  # compact, as a hostile tool writes it
        (subs / name).mkdir(parents=True)
        (subs / name / "hw9.ipynb").write_text(json.dumps(nb, separators=(",", ":")))
    dead = nbformat.read(source / "hw9.ipynb", as_version=4)
    # 14 MB naming square, as a string: the grader's bound is on the text (trust.source reads
    # no cell over 100,000 characters that may bind the name), while the kernel runs it in half
    # a second (as a list of names it spent its whole timeout parsing, 10 CPU-s for nothing)
    dead.cells.insert(2, nbformat.v4.new_code_cell(
        "if False:\n    names = '" + "square, " * 1_800_000 + "'"))
    write(subs / "dead", dead, "hw9")
    submitted = sum(p.stat().st_size for p in subs.rglob("*.ipynb"))
    done = subprocess.run(
        # VmHWM, the peak of this process's own memory: ru_maxrss would also count the pytest
        # worker it was forked from (Linux folds the forked copy's peak in at exec)
        [sys.executable, "-c", "import sys\nfrom edu_dl.cli import main\n"
         "status = main(sys.argv[1:])\n"
         "print('PEAK_KB', next(line.split()[1] for line in open('/proc/self/status')\n"
         "                      if line.startswith('VmHWM:')))\n"
         "sys.exit(status)", "grade", str(subs), "--source", str(source), "--out", str(out),
         # every cell here takes a second at most (10 s is the hostile corpus's timeout for
         # honest cells too); were dead's cell to time out, its test cell runs all the same,
         # for the grader's bound on reading it is what this tests
         "--timeout", "10", "--budget", "90", "--memory", "2048", "--no-skip-after-timeout"],
        capture_output=True, text=True, timeout=600,
        env={**os.environ, "TQDM_DISABLE": "1", sandbox.GROUP_VAR: GROUP})
    assert done.returncode == 0, done.stderr[-3000:]
    peak_mb = int(done.stdout.split("PEAK_KB")[1].split()[0]) / 1024
    with open(out / "grades.csv", newline="") as f:
        rows = {r["student"]: r for r in csv.DictReader(f)}
    assert rows["alice"]["points"] == "1.0"
    assert rows["deep"]["status"] == "refused" and "deeper than 64" in rows["deep"]["message"]
    assert rows["wide"]["points"] == "1.0"  # allowed, and written back compactly
    assert rows["dead"]["status"] == "failed"
    assert "at most 100000 characters" in rows["dead"]["message"], rows["dead"]
    written = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    assert written < 2 * submitted + (2 << 20), (written, submitted)
    for student in ("alice", "wide", "dead"):  # each one's copy for the instructor, compact
        kept = sum(p.stat().st_size for p in (out / "autograded" / student).rglob("*.ipynb"))
        assert kept < 1.1 * (subs / student / "hw9.ipynb").stat().st_size + 4096, student
    assert peak_mb < 700, peak_mb
    print(f"submitted {submitted / 1e6:.1f} MB, wrote {written / 1e6:.1f} MB, "
          f"grader peak {peak_mb:.0f} MB")


# --------------------------------------------------------------------------- the grader's frames


def test_the_frame_peek_scores_zero_in_a_real_batch(tmp_path: Path) -> None:
    """The stream timer (ex17.gpu_timer then) once scored 3/3 by returning
    sys._getframe(1).f_locals["args"][0], the kernel's duration, from the call= wrapper's
    frame."""
    name = "04_timing_the_gpu"
    root = Path(__file__).resolve().parents[3]
    solution = nbformat.read(root / "solutions" / f"{name}.ipynb", as_version=4)
    corpus.write_source(tmp_path / "source", solution, name)
    peek = nbformat.read(root / "solutions" / f"{name}.ipynb", as_version=4)
    cell = next(c for c in peek.cells if "def time_kernel(" in c.source)
    cell.source = ("import sys, time\n"
                   "def time_kernel(launch, synchronize, clock, warmup, repeats):\n"
                   "    synchronize()\n    clock()\n"
                   "    frame, found = sys._getframe(1), None\n"
                   "    while frame is not None and found is None:  # any frame will do\n"
                   "        found = frame.f_locals.get('args') or frame.f_locals.get('kernel_s')\n"
                   "        frame = frame.f_back\n"
                   "    return found[0] if isinstance(found, tuple) else found\n")
    write(tmp_path / "subs" / "mallory", peek, name)
    write(tmp_path / "subs" / "alice", solution, name)
    summary = G.grade(tmp_path / "subs", tmp_path / "source", tmp_path / "out",
                      settings=Settings(timeout_s=120, budget_s=400), jobs=2, progress=False,
                      log=lambda text: None, exercises_due=[name])
    rows = {(r.student, r.part): r for r in summary.rows}
    assert rows[("alice", "ex04.stream_timer")].points == 3.0, rows[("alice", "ex04.stream_timer")]
    peeked = rows[("mallory", "ex04.stream_timer")]
    assert peeked.points == 0 and peeked.status == "failed", peeked
