"""A hostile student against the whole grader, as root (CI) and as an ordinary user (CI again).

Every batch holds an honest control, whose score must stay exact, beside the attacks, each of
which must score 0 or be refused with a status that says why. "Nothing read, nothing written" is
proven from the outside: tokens planted in every hidden place never appear in any gradebook,
feedback or log, the listening sockets get no connection, and every file the batch leaves belongs
to the grader (the sandbox writes no host file at all).
"""

from __future__ import annotations

import csv
import hashlib
import json
import math
import os
import sys
import time
from pathlib import Path

import nbformat
import pytest
from fixtures.hostile import attacks, corpus
from fixtures.hostile.corpus import write
from fixtures.hostile.planted import plant_everywhere

from edu_dl.grading import model, sandbox
from edu_dl.grading.authoring import parts
from edu_dl.grading.settings import Settings
from edu_dl.grading.term import batch as G

ROOT = Path(__file__).resolve().parents[3]
FAST = Settings(timeout_s=20, budget_s=60, memory_mb=2048)
GROUP = f"hostile{os.getpid()}-"

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def _own_sandbox_group(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(sandbox.GROUP_VAR, GROUP)


def all_wrong(nb: nbformat.NotebookNode) -> None:
    corpus.WRONG(nb)
    corpus._replace("peak_bandwidth", "* channels", "+ channels")(nb)


def attacker(code: str) -> nbformat.NotebookNode:
    nb = corpus.student()
    all_wrong(nb)
    corpus._prepend("gflops", code)(nb)
    return nb


def everything_written(out: Path, planted: list[Path]) -> str:
    """Gradebooks, feedback, logs (the run records) and the executed notebooks: everything."""
    texts = []
    for path in sorted(out.rglob("*")):
        if path.is_file() and path not in planted:
            texts.append(path.read_text("utf-8", "replace"))
    return "\n".join(texts)


def points(summary: model.Summary) -> dict[str, float]:
    totals: dict[str, float] = {}
    for row in summary.rows:
        totals[row.student] = totals.get(row.student, 0.0) + row.points
    return totals


def assert_no_process_left() -> None:
    assert corpus.sandbox_processes(GROUP) == [], "a sandbox's process is still running"


def test_escape_reads_nothing_writes_nothing(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    """The root escape of the review, and its quieter variants, against planted secrets."""
    subs, out, source = tmp_path / "submissions", tmp_path / "grades", tmp_path / "source"
    corpus.write_source(source, corpus.source())
    write(subs / "alice", corpus.student())  # the honest control
    out.mkdir()
    planted = plant_everywhere(tmp_path, source, out, subs / "alice")
    parts_file = source / "parts" / "ex02.private.py"  # the trusted part file, beside the source
    try:
        before = hashlib.sha256(parts_file.read_bytes()).hexdigest()
        code = attacks.escape(
            files=[str(p) for p in planted.files] + [str(subs / "alice" / "02_mini.ipynb"),
                                                     str(source / "02_mini.ipynb"),
                                                     str(parts_file)],
            folders=[str(source), str(subs), str(out), str(subs / "alice"), "/var/tmp",
                     str(Path.home()), "/root", "/home", "/run"],
            writable=[str(parts_file), str(ROOT / "edu_dl" / "__init__.py"),
                      str(Path(sys.prefix) / "pyvenv.cfg"), str(source / "02_mini.ipynb"),
                      str(out / "grades.csv")],
            sockets=[listener.path.replace("\0", "@") for listener in planted.listeners])
        write(subs / "mallory", attacker(code))
        write(subs / "zed_wrong", attacker(""))  # graded after the attack: no backdoor took
        summary = G.grade(subs, source, out, settings=FAST, jobs=1, progress=False)
        got = points(summary)
        assert got == {"alice": 2.0, "mallory": 0.0, "zed_wrong": 0.0}, summary.rows
        mallory = {r.part: r for r in summary.rows if r.student == "mallory"}
        assert {r.status for r in mallory.values()} == {"failed"}, mallory  # ran, read nothing
        assert hashlib.sha256(parts_file.read_bytes()).hexdigest() == before
        written = everything_written(out, planted.files) + capsys.readouterr().out
        assert planted.found_in(written) == []
        assert [listener.accepted for listener in planted.listeners] == [0, 0, 0]
        run = json.loads((out / ".work" / "mallory" / corpus.EXERCISE / "run.json").read_text())
        executed = nbformat.read(out / "autograded" / "mallory" / corpus.EXERCISE
                                 / f"{corpus.EXERCISE}.ipynb", as_version=4)
        log = "".join(o.get("text", "") for c in executed.cells if c.cell_type == "code"
                      for o in c.get("outputs", []))
        assert "READ" not in log.replace("READ /proc", "").replace("READ /etc", ""), log
        assert "WROTE" not in log and "CONNECTED" not in log, log
        for call in ("umount2", "mount", "unshare", "ptrace"):
            assert f"syscall {call} -1 Operation not permitted" in log, log
        # The sandbox ran as its own unprivileged uid, and left no file on the host.
        uid = run["sandbox"]["uid"]
        assert run["sandbox"]["uids_seen"] == [uid]
        if os.geteuid() == 0:
            assert uid >= sandbox.UID_BASE
        else:
            assert uid == os.getuid()
        owners = {p.lstat().st_uid for p in tmp_path.rglob("*")}
        assert owners == {os.geteuid()}, owners
        assert_no_process_left()
    finally:
        planted.close()


@pytest.mark.waits
@pytest.mark.timing
def test_time_budget_does_not_grow_with_cells(tmp_path: Path) -> None:
    """24 added cells each sleeping just under the per-cell timeout: the budget still holds."""
    subs, out, source = tmp_path / "submissions", tmp_path / "grades", tmp_path / "source"
    corpus.write_source(source, corpus.source())
    write(subs / "alice", corpus.student())
    for name in ("sleepy1", "sleepy2"):
        nb = corpus.student()
        all_wrong(nb)
        nb.cells[2:2] = [nbformat.v4.new_code_cell("import time; time.sleep(9.5)")
                         for _ in range(24)]
        write(subs / name, nb)
    # 24 cells x 9.5 s would hold a worker 228 s; the budget allows 30 s for everything.
    settings = Settings(timeout_s=10, budget_s=30, memory_mb=2048)
    start = time.monotonic()
    summary = G.grade(subs, source, out, settings=settings, jobs=2, progress=False)
    wall = time.monotonic() - start
    assert points(summary) == {"alice": 2.0, "sleepy1": 0.0, "sleepy2": 0.0}, summary.rows
    assert wall <= math.ceil(3 / 2) * settings.budget_s + 60, wall
    sleepy = [r for r in summary.rows if r.student == "sleepy1"]
    assert {r.status for r in sleepy} <= {"not run", "timeout"}, sleepy
    assert any("time budget of" in r.message for r in sleepy), sleepy
    assert_no_process_left()


def test_links_and_special_files_are_refused(tmp_path: Path) -> None:
    subs, out, source = tmp_path / "submissions", tmp_path / "grades", tmp_path / "source"
    corpus.write_source(source, corpus.source())
    honest = write(subs / "alice", corpus.student())
    (subs / "link_to_alice").mkdir()
    (subs / "link_to_alice" / "02_mini.ipynb").symlink_to(honest)
    (subs / "link_to_source").mkdir()
    (subs / "link_to_source" / "02_mini.ipynb").symlink_to(source / "02_mini.ipynb")
    (subs / "linked_folder").symlink_to(subs / "alice")
    (subs / "deep_link" / "week2").mkdir(parents=True)
    (subs / "deep_link" / "week2" / "02_mini.ipynb").symlink_to(honest)
    (subs / "fifo").mkdir()
    os.mkfifo(subs / "fifo" / "02_mini.ipynb")  # reading it would block the grader forever
    summary = G.grade(subs, source, out, settings=FAST, jobs=2, progress=False)
    got = points(summary)
    assert got.pop("alice") == 2.0
    assert got == {"link_to_alice": 0, "link_to_source": 0, "linked_folder": 0,
                   "deep_link": 0, "fifo": 0}, summary.rows
    for row in summary.rows:
        if row.student != "alice":
            assert row.status == "refused", row
            assert "link" in row.message or "regular file" in row.message, row


def test_names_are_kept_and_files_never_shared(tmp_path: Path) -> None:
    subs, out, source = tmp_path / "submissions", tmp_path / "grades", tmp_path / "source"
    corpus.write_source(source, corpus.source())
    wrong = corpus.student()
    all_wrong(wrong)
    write(subs / "李娜", corpus.student())
    write(subs / "王伟", wrong)
    write(subs / ".carol", corpus.student())
    write(subs / "submitted", corpus.student())  # a student's name, not nbgrader's layout here
    write(subs / "=1+2", wrong)
    summary = G.grade(subs, source, out, settings=FAST, jobs=2, progress=False)
    assert points(summary) == {"李娜": 2.0, "王伟": 0.0, ".carol": 2.0, "submitted": 2.0,
                               "=1+2": 0.0}, summary.rows
    assert not [r for r in summary.rows if r.status == "grader error"]
    feedback = sorted(p.name for p in (out / "feedback").glob("*.md"))
    assert len(feedback) == 5 and len(set(feedback)) == 5, feedback
    pages = {p.relative_to(out / "feedback").parts[0] for p in
             (out / "feedback").glob("*/*/*.html")}  # a notebook page each, apart
    assert len(pages) == 5 and {f"{page}.md" for page in pages} == set(feedback), pages
    with open(out / "grades.csv", newline="", encoding="utf-8") as f:
        students = {r["student"] for r in csv.DictReader(f)}
    assert students == {"李娜", "王伟", ".carol", "submitted", "'=1+2"}
    for name in ("grades.csv", "nbgrader_grades.csv"):
        text = (out / name).read_text("utf-8")
        assert "\n=1+2," not in text and "'=1+2" in text, text


def test_huge_messages_are_cut_and_the_gradebook_stays_readable(tmp_path: Path) -> None:
    subs, out, source = tmp_path / "submissions", tmp_path / "grades", tmp_path / "source"
    corpus.write_source(source, corpus.source())
    write(subs / "alice", corpus.student())
    loud = corpus.student()
    corpus._replace("gflops", "return 2.0 * n**3 / seconds / 1e9",
                    "raise ValueError('x' * 1_000_000)")(loud)
    write(subs / "loud", loud)
    summary = G.grade(subs, source, out, settings=FAST, jobs=2, progress=False)
    assert points(summary) == {"alice": 2.0, "loud": 1.0}, summary.rows
    with open(out / "grades.csv", newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))  # csv's own 131072-character field limit holds
    assert max(len(r["message"]) for r in rows) <= model.MESSAGE_CAP + 100
    assert (out / "grades.csv").stat().st_size < 100_000


def test_oversized_notebooks_and_results_are_refused(tmp_path: Path) -> None:
    subs, out, source = tmp_path / "submissions", tmp_path / "grades", tmp_path / "source"
    corpus.write_source(source, corpus.source())
    write(subs / "alice", corpus.student())
    big = corpus.student()
    big.cells.append(nbformat.v4.new_markdown_cell("x" * (3 << 20)))
    write(subs / "big", big)
    # What the student controls inside the result: the npz files in outputs/. A bzip2 member
    # there (a decompression bomb's kind) is refused unread, and a check call's real result wins.
    bomb = corpus.student()
    all_wrong(bomb)
    bomb.cells.append(nbformat.v4.new_code_cell(
        "import os, zipfile\n"
        "folder = os.path.join(os.environ['EDU_DL_GRADING_DIR'], 'outputs')\n"
        "with zipfile.ZipFile(os.path.join(folder, 'ex02.gflops.999.npz'), 'w',\n"
        "                     zipfile.ZIP_BZIP2) as zf:\n"
        "    zf.writestr('hidden.npy', bytes(50 * 2**20))"))
    write(subs / "bomb", bomb)
    settings = Settings(timeout_s=20, budget_s=60, memory_mb=2048, notebook_mb=2)
    summary = G.grade(subs, source, out, settings=settings, jobs=2, progress=False)
    assert points(summary) == {"alice": 2.0, "big": 0.0, "bomb": 0.0}, summary.rows
    big_rows = [r for r in summary.rows if r.student == "big"]
    assert {r.status for r in big_rows} == {"refused"}
    assert "over the limit of 2 MB" in big_rows[0].message
    assert not (out / "autograded" / "big").exists()
    bomb_rows = {r.part: r for r in summary.rows if r.student == "bomb"}
    assert bomb_rows["ex02.gflops"].status == "failed", bomb_rows  # judged on its real result
    assert "expected 40, got 20" in bomb_rows["ex02.gflops"].message


def test_the_grader_loads_every_part_before_any_sandbox_runs(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch
                                                             ) -> None:
    corpus.write_source(tmp_path / "source", corpus.source())
    write(tmp_path / "subs" / "alice", corpus.student())
    monkeypatch.setattr(parts, "_MODULES", {})  # no part file loaded yet
    part_file = (tmp_path / "source" / "parts" / "ex02.private.py").resolve()
    seen: list[bool] = []

    def fake_run(*args: object, **kwargs: object) -> sandbox.Result:
        seen.append(any(path.resolve() == part_file for path, _, _ in parts._MODULES))
        return sandbox.Result(returncode=0)

    monkeypatch.setattr(sandbox, "run", fake_run)
    G.grade(tmp_path / "subs", tmp_path / "source", tmp_path / "out", settings=FAST,
            progress=False)
    assert seen == [True]


def test_patched_in_sandbox_helpers_claim_nothing(tmp_path: Path) -> None:
    """The review's attack on exercise 6: prefetch as ``yield from batches`` (no thread), with the
    in-sandbox call replaced so that it claims success. Judged outside: 0 of 3 points."""
    name = "06_feeding_the_gpu"
    solution = nbformat.read(ROOT / "solutions" / f"{name}.ipynb", as_version=4)
    corpus.write_source(tmp_path / "source", solution, name)
    cheat = nbformat.read(ROOT / "solutions" / f"{name}.ipynb", as_version=4)
    cell = next(c for c in cheat.cells if "def prefetch(" in c.source)
    # The part's call= comes pickled into the sandbox: the cheat swaps what unpickles it for a
    # call that stacks the batches itself (the public half's _stacked, pasted) and skips the
    # thread check.
    cell.source = (
        "import numpy as np\n"
        "import edu_dl.grading.checking as checking\n"
        "def _stacked(received, data):\n"
        "    return np.stack(received) if received else np.zeros((0, *data.shape[1:]), "
        "data.dtype)\n"
        "class _Forged:\n"
        "    @staticmethod\n"
        "    def loads(data):\n"
        "        return lambda fn, args: (_stacked(list(fn(*args)), np.asarray(args[0])), "
        "len(args[0]))\n"
        "checking.pickle = _Forged\n"
        "def prefetch(batches, depth):\n    yield from batches\n")
    write(tmp_path / "subs" / "mallory", cheat, name)
    write(tmp_path / "subs" / "alice", solution, name)
    summary = G.grade(tmp_path / "subs", tmp_path / "source", tmp_path / "out",
                      settings=Settings(timeout_s=60, budget_s=300), jobs=2, progress=False)
    rows = {(r.student, r.part): r for r in summary.rows}
    assert all(r.status == "passed" for (s, _), r in rows.items() if s == "alice"), rows
    cheat_row = rows[("mallory", "ex06.prefetch")]
    assert cheat_row.status == "failed" and cheat_row.points == 0, cheat_row
    assert "thread" in cheat_row.message.lower(), cheat_row
    # the forged call did run: perfect values came back, and only the source gave it away
    assert cheat_row.message.startswith("the values are right, but"), cheat_row
