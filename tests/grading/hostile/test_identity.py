"""One student, one name (issue 35, items 2 to 4), from the attacker's side.

Each test asserts what the victim keeps: Bob's notebook stays Bob's whatever Alice names her
upload; alice's hand override never lands on a folder named like her; jdoe's grade reaches the
LMS whatever her id starts with. Names that would be one student somewhere are refused, naming
both, before anything is graded or written.
"""

from __future__ import annotations

import csv
import os
from pathlib import Path

import pytest
from fixtures.hostile import corpus
from fixtures.lms_fixtures import MINI, csv_file, notebook, read_csv, write_zip

from edu_dl.cli import main
from edu_dl.grading import sandbox
from edu_dl.grading.model import BY_HAND, Row
from edu_dl.grading.term import batch as G
from edu_dl.grading.term import manual, report
from edu_dl.grading.term.csvio import WrittenCsv, csv_bytes, spreadsheet_safe, unguard
from edu_dl.grading.term.lms import formats, metadata
from edu_dl.grading.term.lms.collect import Collected, CollectError, collect_downloads
from edu_dl.grading.term.lms.roster import read_lms_roster
from edu_dl.grading.term.policy import Dates, PolicyError
from edu_dl.grading.trust.identity import NameClash
from edu_dl.grading.trust.text import for_terminal

GROUP = f"identity{os.getpid()}-"
ALICE, BOB = "1234567", "7654321"  # Moodle participant ids
CRAFTED = f"x_{BOB}_assignsubmission_file_{MINI}"  # what Alice names her upload


@pytest.fixture(autouse=True)
def _own_sandbox_group(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(sandbox.GROUP_VAR, GROUP)


def moodle_roster(tmp_path: Path, *, email_only: bool = False) -> Path:
    if email_only:
        return csv_file(tmp_path / "roster.csv", ["id", "email"],
                        [["alice", "alice@uni.example"], ["bob", "bob@uni.example"]])
    return csv_file(tmp_path / "roster.csv", ["id", "email", "moodle_participant_id"],
                    [["alice", "alice@uni.example", ALICE], ["bob", "bob@uni.example", BOB]])


def worksheet(tmp_path: Path) -> metadata.Metadata:
    """Moodle's grading worksheet: Bob submitted on the 1st, Alice later (on the 2nd)."""
    return metadata.read_moodle(csv_file(
        tmp_path / "worksheet.csv",
        ["Identifier", "Full name", "Email address", "Status", "Last modified (submission)"],
        [[f"Participant {ALICE}", "Alice Smith", "alice@uni.example", "Submitted",
          "2026-03-02T10:00:00+00:00"],
         [f"Participant {BOB}", "Bob Jones", "bob@uni.example", "Submitted",
          "2026-03-01T08:00:00+00:00"]]))


def moodle_collect(tmp_path: Path, members: list[tuple[str, bytes]], *,
                   email_only: bool = False) -> tuple[Collected, Path]:
    download = write_zip(tmp_path / "moodle.zip", members)
    out = tmp_path / "subs"
    found = collect_downloads("moodle", [download],
                              read_lms_roster(moodle_roster(tmp_path, email_only=email_only)),
                              out, pattern=formats.compile_pattern("moodle"),
                              metadata=worksheet(tmp_path))
    return found, out


BOBS = notebook("good")  # Bob's own work
ALICES = notebook("wrong")  # what Alice would have counted as Bob's


@pytest.mark.parametrize("alices_member", [
    f"Alice Smith_{ALICE}_assignsubmission_file_{CRAFTED}-9.ipynb",  # flattened, "resubmission"
    f"Alice Smith_{ALICE}_assignsubmission_file_{CRAFTED}.ipynb",  # flattened: "ambiguous"
    f"Alice Smith_{ALICE}_assignsubmission_file_/{CRAFTED}-9.ipynb",  # folder mode
    f"Alice Smith_{ALICE}_assignsubmission_file_/x_{BOB}_assignsubmission_file_/{MINI}.ipynb",
], ids=["flat-9", "flat", "folder", "subfolder"])
@pytest.mark.parametrize("email_only", [False, True], ids=["participant-ids", "email-only"])
def test_alices_crafted_moodle_upload_leaves_bobs_notebook_bobs(
        tmp_path: Path, alices_member: str, email_only: bool) -> None:
    bobs_member = f"Bob Jones_{BOB}_assignsubmission_file_/{MINI}.ipynb"
    found, out = moodle_collect(tmp_path, [(bobs_member, BOBS), (alices_member, ALICES)],
                                email_only=email_only)
    bob = out / "submitted" / "bob" / MINI
    assert (bob / f"{MINI}.ipynb").read_bytes() == BOBS
    assert (bob / "timestamp.txt").read_text().startswith("2026-03-01 08:00:00")  # Bob's time
    by_member = {line.member: line for line in found.lines}
    assert (by_member[bobs_member].student, by_member[bobs_member].status) == ("bob",
                                                                               "collected")
    alices = by_member[alices_member]
    assert (alices.user, alices.student, alices.status) == (ALICE, "alice", "refused")
    assert "is itself named like a submission" in alices.message
    assert not (out / "submitted" / "alice").exists()  # nor is it taken as Alice's own


def test_alices_honest_notebook_beside_the_crafted_one_is_still_hers(tmp_path: Path) -> None:
    found, out = moodle_collect(tmp_path, [
        (f"Alice Smith_{ALICE}_assignsubmission_file_/{MINI}.ipynb", ALICES),
        (f"Alice Smith_{ALICE}_assignsubmission_file_/{CRAFTED}-9.ipynb", BOBS),
        (f"Bob Jones_{BOB}_assignsubmission_file_{MINI}.ipynb", BOBS)])
    assert (out / "submitted" / "alice" / MINI / f"{MINI}.ipynb").read_bytes() == ALICES
    assert (out / "submitted" / "bob" / MINI / f"{MINI}.ipynb").read_bytes() == BOBS
    assert sorted(line.status for line in found.lines) == ["collected", "collected", "refused"]


def test_an_honest_notebook_in_a_subfolder_of_moodles_folder_is_collected(
        tmp_path: Path) -> None:
    """Moodle's folder mode keeps the folders a student made; only the first component
    (Moodle's own) says whose the files are."""
    found, out = moodle_collect(tmp_path, [
        (f"Alice Smith_{ALICE}_assignsubmission_file_/week 2/{MINI}.ipynb", ALICES)])
    assert (out / "submitted" / "alice" / MINI / f"{MINI}.ipynb").read_bytes() == ALICES
    assert [line.status for line in found.lines] == ["collected"]


def test_a_crafted_canvas_upload_is_refused_and_bob_keeps_his(tmp_path: Path) -> None:
    roster = csv_file(tmp_path / "roster.csv", ["id", "canvas_id"], [["alice", "101"],
                                                                     ["bob", "102"]])
    download = write_zip(tmp_path / "canvas.zip", [
        (f"jonesbob_102_5002_{MINI}.ipynb", BOBS),
        (f"smithalice_101_5001_jonesbob_102_5009_{MINI}-9.ipynb", ALICES),
        (f"sub/jonesbob_102_5010_{MINI}-9.ipynb", ALICES)])  # not at the download's root
    out = tmp_path / "subs"
    found = collect_downloads("canvas", [download], read_lms_roster(roster), out,
                              pattern=formats.compile_pattern("canvas"))
    assert (out / "submitted" / "bob" / MINI / f"{MINI}.ipynb").read_bytes() == BOBS
    assert [(line.student, line.status) for line in found.lines] == [
        ("alice", "refused"), ("", "unrecognised name"), ("bob", "collected")]


def test_a_pattern_that_lets_the_upload_choose_the_owner_is_refused(tmp_path: Path) -> None:
    with pytest.raises(formats.PatternError, match="anchored"):
        formats.compile_pattern("moodle", r"(?P<user>[0-9]+)_(?P<file>[^/]+)$")
    # Anchored, but its owner's id is read after the uploaded name begins.
    late_owner = formats.compile_pattern("moodle", r"^(?P<file>[^/]*?)_(?P<user>[0-9]+)\.ipynb$")
    named = formats.parse_name(late_owner, f"{MINI}_{BOB}.ipynb")
    assert named is not None and "from the uploaded name" in named.problem


# --------------------------------------------------------------------------- names at grade

SAME_TO_SOMEBODY = [("alice", "alice "), ("a\x01", "a\\x01"), ("b\udcff", "b\\xff"),
                    ("alice\u200b", "alice"), ("Alice", "alice"), ("ﬁona", "fiona")]


@pytest.mark.parametrize("first,second", SAME_TO_SOMEBODY,
                         ids=["space", "control", "byte", "zero-width", "case", "nfkc"])
def test_two_folders_that_are_one_name_are_refused_naming_both(
        tmp_path: Path, first: str, second: str) -> None:
    source, subs, out = tmp_path / "source", tmp_path / "subs", tmp_path / "grades"
    corpus.write_source(source, corpus.source())
    corpus.write(subs / first, corpus.student())
    corpus.write(subs / second, corpus.student(solved=False))
    with pytest.raises(NameClash) as caught:
        G.grade(subs, source, out, progress=False)
    said = str(caught.value)
    for name in (first, second):  # escaped; spelled out in full where the escapes are alike
        assert f"'{for_terminal(name)}'" in said or ascii(name) in said, said
    assert not out.exists()  # refused before anything was graded or written


def test_lms_collect_refuses_a_roster_or_folder_that_is_one_name(tmp_path: Path) -> None:
    with pytest.raises(PolicyError, match="'Bob' and 'bob'"):
        read_lms_roster(csv_file(tmp_path / "r.csv", ["id"], [["bob"], ["Bob"]]))
    (tmp_path / "subs" / "submitted" / "Alice").mkdir(parents=True)
    with pytest.raises(CollectError, match="'Alice' and 'alice'"):
        collect_downloads("moodle", [], read_lms_roster(moodle_roster(tmp_path)),
                          tmp_path / "subs", pattern=formats.compile_pattern("moodle"))


def _rows(*students: str) -> list[Row]:
    return [Row(s, MINI, "ex02.gflops", 0.0, 1.0, "failed", "expected 40, got 20")
            for s in students]


@pytest.mark.parametrize("students,line", [
    (("alice", "alice "), "alice"),  # two rows are written "alice"
    (("alice\u200b",), "alice"),  # no row exactly, one once the invisible is dropped
    (("Alice",), "alice"),
    (("a\x01",), "a"),
])
def test_a_manual_line_that_is_not_exactly_one_student_is_refused(
        tmp_path: Path, students: tuple[str, ...], line: str) -> None:
    rows = _rows(*students)
    with pytest.raises(manual.ManualSheetError, match="not applied"):
        manual.merge(rows, {(line, MINI, "ex02.gflops"): (1.0, "reason", "")},
                     tmp_path / "sheet.csv")
    assert [r.points for r in rows] == [0.0] * len(rows)  # nobody got the override


def test_the_sheets_own_line_for_an_escaped_name_still_reaches_its_student(
        tmp_path: Path) -> None:
    """The grader writes "a\\x01" for a folder "a<SOH>": that line is that student's."""
    rows = _rows("a\x01", "alice")
    sheet = tmp_path / "sheet.csv"
    sheet.write_bytes(csv_bytes(manual.COLUMNS, [
        [*line[:manual.COLUMNS.index("points")], "1", "why"] for line in manual.sheet(
            [Row(r.student, r.exercise, r.part, 0.0, 1.0, manual.NEEDS, "", judged=BY_HAND)
             for r in rows], {})]))
    filled = manual.read_sheet(sheet)
    assert manual.merge(rows, filled, sheet) == 2
    assert [(r.student, r.points, r.status) for r in rows] == [
        ("a\x01", 1.0, manual.OVERRIDDEN), ("alice", 1.0, manual.OVERRIDDEN)]


def test_an_extension_is_one_students_or_refused() -> None:
    from datetime import UTC, datetime

    later = datetime(2026, 3, 9, tzinfo=UTC)
    dates = Dates(extensions={("alice", ""): later, ("nobody", ""): later})
    kept, notes = dates.for_students(["alice", "bob"])
    assert kept.due_for("alice", MINI) == (later, True)
    assert notes and "'nobody'" in notes[0]
    with pytest.raises(PolicyError, match="'alice' is no student exactly, but is 'Alice'"):
        dates.for_students(["Alice", "bob"])
    escaped = Dates(extensions={("a\\x01", ""): later}).for_students(["a\x01"])[0]
    assert escaped.due_for("a\x01", MINI) == (later, True)  # the name the gradebook shows


@pytest.mark.slow
def test_alice_keeps_her_override_when_a_folder_named_like_her_appears(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 35's reproduction: folders "alice" and "alice " with the line
    ``alice,02_mini,ex02.gflops,1,reason``. Before, "alice " got the point and alice kept 0."""
    source, subs, out = tmp_path / "source", tmp_path / "subs", tmp_path / "grades"
    corpus.write_source(source, corpus.source())
    wrong = corpus.student()
    corpus.WRONG(wrong)
    corpus.write(subs / "alice", wrong)
    sheet = tmp_path / "sheet.csv"
    sheet.write_text(f"student,exercise,cell,points,comment\nalice,{MINI},ex02.gflops,1,"
                     "the units were ambiguous\n")
    argv = ["grade", str(subs), "--source", str(source), "--out", str(out), "--timeout", "20",
            "--memory", "2048", "--manual", str(sheet)]
    assert main(argv) == 0
    gradebook = (out / "grades.csv").read_bytes()

    def alices() -> dict[str, str]:
        with open(out / "grades.csv", newline="") as f:
            return {r["part"]: r for r in csv.DictReader(f)
                    if r["student"] == "alice"}["ex02.gflops"]

    assert (alices()["points"], alices()["status"]) == ("1.0", "overridden")
    corpus.write(subs / "alice ", corpus.student())  # mallory's folder, named like alice's
    capsys.readouterr()
    assert main(argv) == 2
    said = capsys.readouterr().err
    assert "'alice' and 'alice '" in said and "nothing was graded" in said, said
    assert (out / "grades.csv").read_bytes() == gradebook  # alice keeps her override
    assert (alices()["points"], alices()["status"]) == ("1.0", "overridden")


# --------------------------------------------------------------------------- exports


@pytest.mark.parametrize("kind", ["canvas", "moodle"])
def test_jdoes_grade_survives_export_whatever_her_id_starts_with(
        tmp_path: Path, kind: str, capsys: pytest.CaptureFixture[str]) -> None:
    """grades.csv writes "-jdoe" as "'-jdoe" (a formula guard); the export reads it back."""
    ids = {"-jdoe": 2.0, "+x": 1.0, "@y": 0.5, "plain": 0.0}
    out = tmp_path / "grades"
    rows = [Row(student, MINI, "ex02.gflops", got, 2.0, "passed", "") for student, got in
            ids.items()]
    report.write_outputs(out, rows, [], log=lambda text: None)
    assert "'-jdoe" in (out / "grades.csv").read_text()  # the guard is there in the file
    people = csv_file(tmp_path / "roster.csv", ["id", "email", "canvas_id"],
                      [[student, f"s{i}@uni.example", str(100 + i)]
                       for i, student in enumerate(ids)])
    exported = tmp_path / "import.csv"
    capsys.readouterr()
    assert main(["lms", "export", kind, str(out), "--roster", str(people), "--out",
                 str(exported)]) == 0
    assert "warning" not in capsys.readouterr().err
    lines = read_csv(exported)
    column = 1 if kind == "moodle" else 5
    students = lines[1:] if kind == "moodle" else lines[2:]  # Canvas: "Points Possible" first
    got = {line[0 if kind == "moodle" else 1]: line[column] for line in students}
    expect = {(f"s{i}@uni.example" if kind == "moodle" else str(100 + i)): f"{ids[s]}"
              for i, s in enumerate(ids)}
    assert got == expect


def test_a_name_starting_with_the_guard_itself_reads_back_as_it_was(tmp_path: Path) -> None:
    texts = ["-jdoe", "+x", "@y", "=SUM(A1)", "'=z", "''", "'plain", "'", "plain", "\t-"]
    for text in texts:
        assert unguard(spreadsheet_safe(text)) == text
    assert len({spreadsheet_safe(t) for t in texts}) == len(texts)  # no two written alike
    data = csv_bytes(["student"], [[t] for t in texts]).decode()
    assert [line["student"] for line in WrittenCsv(data)] == \
        [for_terminal(t) for t in texts]


def test_invisible_characters_in_a_name_are_shown_as_escapes(tmp_path: Path) -> None:
    name = "alice\u200b\u00a0\u202e"
    out = tmp_path / "grades"
    report.write_outputs(out, _rows(name), [], log=lambda text: None)
    for path in (out / "grades.csv", out / "feedback" / next(
            p.name for p in (out / "feedback").iterdir()),
            next((out / "feedback_html").iterdir())):
        text = path.read_text()
        assert "alice\\u200b\\xa0\\u202e" in text, path
        assert not any(ch in text for ch in "\u200b\u00a0\u202e"), path


def test_a_graded_look_alike_never_exports_onto_the_roster_student(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """grades.csv from a run without --roster holds "Alice"; the roster's alice has no grade:
    hers stays empty (the LMS keeps what it had) and the warning names both."""
    out = tmp_path / "grades"
    report.write_outputs(out, [Row("Alice", MINI, "ex02.gflops", 2.0, 2.0, "passed", "")], [],
                         log=lambda text: None)
    people = csv_file(tmp_path / "roster.csv", ["id", "email"], [["alice", "a@uni.example"]])
    exported = tmp_path / "import.csv"
    capsys.readouterr()
    assert main(["lms", "export", "moodle", str(out), "--roster", str(people), "--out",
                 str(exported)]) == 0
    assert read_csv(exported)[1] == ["a@uni.example", ""]
    warned = capsys.readouterr().err
    assert "'Alice' is no student exactly, but is 'alice'" in warned and \
        "not exported" in warned, warned
