"""``edu-dl lms``: Canvas and Moodle downloads collected, graded, and exported back.

Fixtures are the formats as assumed (tests/fixtures/lms_fixtures.py); the round trips grade
the hostile corpus's tiny exercise in real sandboxes.
"""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path

import pytest
from fixtures.hostile import corpus
from fixtures.lms_fixtures import MINI, ROSTER_HEADER, csv_file, notebook, read_csv, write_zip

from edu_dl.cli import main
from edu_dl.grading import sandbox
from edu_dl.grading.term.lms import formats, metadata
from edu_dl.grading.term.lms.collect import CollectError, collect_downloads
from edu_dl.grading.term.lms.roster import read_lms_roster
from edu_dl.grading.term.policy import PolicyError
from edu_dl.grading.trust.files import timestamp_of

GROUP = f"pytest{os.getpid()}-"


@pytest.fixture(autouse=True)
def _own_sandbox_group(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(sandbox.GROUP_VAR, GROUP)


def roster(path: Path) -> Path:
    return csv_file(path, ROSTER_HEADER, [
        ["alice", "Alice", "Smith", "alice@uni.example", "101", "S001", "asmith", "Sec A",
         "N-1"],
        # A student-chosen name that a spreadsheet would run as a formula.
        ["bob", "Bob", "=HYPERLINK(\"http://x\")", "Bob@Uni.example", "102", "S002", "bjones",
         "Sec B", "N-2"],
        ["carol", "Carol", "Diaz", "carol@uni.example", "", "S003", "cdiaz", "Sec A", "N-3"],
    ])


def collected(out: Path) -> dict[tuple[str, str], Path]:
    return {(p.parents[1].name, p.parent.name): p
            for p in (out / "submitted").glob("*/*/*.ipynb")}


# --------------------------------------------------------------------------- names


def test_canvas_names_and_the_resubmission_suffix() -> None:
    pattern = formats.compile_pattern("canvas")
    first = formats.parse_name(pattern, "smithalice_101_5001_08_autograd_from_scratch.ipynb")
    again = formats.parse_name(pattern,
                               "smithalice_LATE_101_5001_08_autograd_from_scratch-1.ipynb")
    assert first is not None and again is not None
    assert (first.user, first.submission, first.resubmission) == ("101", 5001, 0)
    assert (again.user, again.submission, again.resubmission) == ("101", 5001, 1)
    assert first.stem == again.stem == "08_autograd_from_scratch"
    assert formats.parse_name(pattern, "08_autograd_from_scratch.ipynb") is None
    moodle = formats.compile_pattern("moodle")
    for path in ("Alice Smith_1234567_assignsubmission_file_/02_mini-2.ipynb",
                 "Alice Smith_1234567_assignsubmission_file_02_mini-2.ipynb"):
        named = formats.parse_name(moodle, path)
        assert named is not None and (named.user, named.stem, named.resubmission) == \
            ("1234567", "02_mini", 2)
    with pytest.raises(formats.PatternError, match="user"):
        formats.compile_pattern("canvas", r"(?P<file>.*)")
    with pytest.raises(formats.PatternError, match="not a regular expression"):
        formats.compile_pattern("canvas", r"(?P<user>")


def test_latest_resubmission_wins_by_the_lms_naming_not_by_mtime(tmp_path: Path) -> None:
    """A Canvas resubmission named 05_x-1.ipynb was scored 0 as "not an exercise" (issue 24):
    collected as the exercise, it replaces the first upload, whatever the files' times say."""
    download = write_zip(tmp_path / "canvas.zip", [
        ("smithalice_LATE_101_5001_02_mini-1.ipynb", notebook("good")),
        ("smithalice_101_5001_02_mini.ipynb", notebook("wrong")),
        ("jonesbob_102_5002_02_mini-2.ipynb", notebook("good")),
        ("jonesbob_102_5002_02_mini-10.ipynb", notebook("wrong")),  # 10 > 2, not "1" < "2"
    ], dates={"smithalice_101_5001_02_mini.ipynb": (2026, 3, 9, 0, 0, 0)})  # a newer mtime
    found = collect_downloads("canvas", [download], read_lms_roster(roster(tmp_path / "r.csv")),
                              tmp_path / "subs", pattern=formats.compile_pattern("canvas"))
    files = collected(tmp_path / "subs")
    assert sorted(files) == [("alice", MINI), ("bob", MINI)]
    assert files[("alice", MINI)].read_bytes() == notebook("good")
    assert files[("bob", MINI)].read_bytes() == notebook("wrong")
    older = {(line.student, line.member) for line in found.problems}
    assert older == {("alice", "smithalice_101_5001_02_mini.ipynb"),
                     ("bob", "jonesbob_102_5002_02_mini-2.ipynb")}
    assert {line.status for line in found.problems} == {"older resubmission"}


# --------------------------------------------------------------------------- timestamps


def test_times_come_from_canvas_metadata_never_from_the_submission(tmp_path: Path) -> None:
    download = write_zip(tmp_path / "canvas.zip", [
        ("smithalice_101_5001_02_mini.ipynb", notebook()),
        # A timestamp.txt the student uploaded, claiming an early time: never used.
        ("smithalice_101_5001_timestamp.txt", b"2020-01-01 00:00:00.000000 UTC"),
        ("jonesbob_102_5002_02_mini.ipynb", notebook()),
    ])
    api = [{"user_id": 101, "submitted_at": "2026-03-01T10:00:00Z", "attempt": 1},
           {"user_id": 101, "submitted_at": "2026-03-02T09:30:00Z", "attempt": 2},
           {"user_id": 102, "submitted_at": None, "attempt": None}]
    (tmp_path / "subs.json").write_text(json.dumps(api))
    meta = metadata.read_canvas(tmp_path / "subs.json")
    people = read_lms_roster(roster(tmp_path / "r.csv"))
    out = tmp_path / "subs"
    found = collect_downloads("canvas", [download], people, out, metadata=meta,
                              pattern=formats.compile_pattern("canvas"))
    alice = out / "submitted" / "alice" / MINI
    assert timestamp_of(alice) == (datetime(2026, 3, 2, 9, 30, tzinfo=UTC), "")
    assert not (out / "submitted" / "bob" / MINI / "timestamp.txt").exists()
    lines = {line.student: line for line in found.written}
    assert "no submission time in the metadata" in lines["bob"].message
    assert [line.status for line in found.problems] == ["not a notebook"]
    assert "timestamp" in found.problems[0].member

    # Collected again without metadata: no time is written, and the old one is gone.
    again = collect_downloads("canvas", [download], people, out,
                              pattern=formats.compile_pattern("canvas"))
    assert not (alice / "timestamp.txt").exists()
    assert all("no --metadata given" in line.message for line in again.written)


def test_moodle_worksheet_times_and_ids(tmp_path: Path) -> None:
    sheet = csv_file(tmp_path / "worksheet.csv",
                     ["Identifier", "Full name", "Email address", "Status", "Grade",
                      "Last modified (submission)"],
                     [["Participant 1234567", "Alice Smith", "ALICE@uni.example", "Submitted",
                       "", "Monday, 2 March 2026, 11:59 PM"],
                      ["Participant 7654321", "Bob", "bob@uni.example", "Submitted", "",
                       "2026-03-01T08:00:00+00:00"],
                      ["Participant 5555555", "Carol", "carol@uni.example", "No submission",
                       "", "-"],
                      ["junk", "", "", "", "", "Someday"]])
    meta = metadata.read_moodle(sheet, metadata.timezone("Europe/Berlin"))
    assert meta.by_user["1234567"].time == datetime(2026, 3, 2, 22, 59, tzinfo=UTC)
    assert meta.by_user["7654321"].time == datetime(2026, 3, 1, 8, 0, tzinfo=UTC)
    assert meta.by_user["5555555"].time is None
    assert meta.problems == ["--metadata line 5: no participant identifier; skipped"]
    with pytest.raises(PolicyError, match="time zone"):
        metadata.timezone("Mars/Olympus")
    with pytest.raises(PolicyError, match="grading worksheet"):
        metadata.read_moodle(csv_file(tmp_path / "x.csv", ["user_id"], [["1"]]))


def test_ids_map_through_the_metadata_to_sis_ids(tmp_path: Path) -> None:
    """carol has no canvas_id on the roster: the submissions export gives her SIS id."""
    download = write_zip(tmp_path / "c.zip", [("diazcarol_103_5003_02_mini.ipynb", notebook()),
                                              ("ghost_999_5004_02_mini.ipynb", notebook())])
    csv_file(tmp_path / "subs.csv", ["user_id", "submitted_at", "sis_user_id", "login_id"],
             [["103", "2026-03-01T12:00:00Z", "S003", "cdiaz"]])
    meta = metadata.read_canvas(tmp_path / "subs.csv")
    found = collect_downloads("canvas", [download], read_lms_roster(roster(tmp_path / "r.csv")),
                              tmp_path / "out", metadata=meta,
                              pattern=formats.compile_pattern("canvas"))
    assert sorted(collected(tmp_path / "out")) == [("carol", MINI)]
    assert [(line.user, line.status) for line in found.problems] == \
        [("999", "not on the roster")]


def test_roster_and_output_folder_are_checked(tmp_path: Path) -> None:
    bad = csv_file(tmp_path / "bad.csv", ["id", "email"], [["a", "x@y"], ["b", "X@Y"]])
    with pytest.raises(PolicyError, match="share the email"):
        read_lms_roster(bad)
    with pytest.raises(PolicyError, match="field larger than field limit"):
        read_lms_roster(csv_file(tmp_path / "huge.csv", ["id", "first_name"],
                                 [["a", "x" * 200_000]]))
    with pytest.raises(PolicyError, match="field larger than field limit"):
        metadata.read_canvas(csv_file(tmp_path / "huge.csv", ["user_id"], [["1" * 200_000]]))
    (tmp_path / "obj.json").write_text('{"user_id": 1}')
    with pytest.raises(PolicyError, match="JSON array"):
        metadata.read_canvas(tmp_path / "obj.json")
    (tmp_path / "deep.json").write_text("[" * 100 + "]" * 100)
    with pytest.raises(PolicyError, match="nested deeper"):
        metadata.read_canvas(tmp_path / "deep.json")
    with pytest.raises(PolicyError, match="not a plain name"):
        read_lms_roster(csv_file(tmp_path / "dots.csv", ["id"], [["../etc"]]))
    (tmp_path / "busy" / "alice").mkdir(parents=True)
    with pytest.raises(CollectError, match="not nbgrader's folders"):
        collect_downloads("canvas", [], read_lms_roster(roster(tmp_path / "r.csv")),
                          tmp_path / "busy", pattern=formats.compile_pattern("canvas"))


def test_two_uploads_of_equal_standing_are_not_a_guess(tmp_path: Path) -> None:
    """--as maps two differently named uploads of one submission to one exercise: neither is
    the later one, so neither is collected (and one collected before is removed)."""
    people = read_lms_roster(roster(tmp_path / "r.csv"))
    out = tmp_path / "out"
    first = write_zip(tmp_path / "a.zip", [("smithalice_101_1_a.ipynb", notebook())])
    collect_downloads("canvas", [first], people, out, exercise=MINI,
                      pattern=formats.compile_pattern("canvas"))
    assert sorted(collected(out)) == [("alice", MINI)]
    both = write_zip(tmp_path / "b.zip", [("smithalice_101_2_a.ipynb", notebook()),
                                          ("smithalice_101_2_b.ipynb", notebook("wrong"))])
    found = collect_downloads("canvas", [both], people, out, exercise=MINI,
                              pattern=formats.compile_pattern("canvas"))
    assert collected(out) == {}
    assert [line.status for line in found.lines] == ["ambiguous", "ambiguous"]


def test_custom_pattern_and_as(tmp_path: Path) -> None:
    """An instructor's own naming: login ids in the name, any notebook name (--as)."""
    folder = tmp_path / "download" / "asmith"
    folder.mkdir(parents=True)
    (folder / "my homework (final).ipynb").write_bytes(notebook())
    argv = ["lms", "collect", "canvas", str(tmp_path / "download"), "--roster",
            str(roster(tmp_path / "r.csv")), "--out", str(tmp_path / "out"),
            "--pattern", r"^(?P<user>[a-z]+)/(?P<file>[^/]+)$", "--match-by", "sis_login_id",
            "--as", MINI]
    assert main(argv) == 0
    assert sorted(collected(tmp_path / "out")) == [("alice", MINI)]
    assert main([*argv[:-2], "--pattern", "(?P<file>x"]) == 2
    assert main([*argv[:-1], "../up"]) == 2
    assert main([*argv[:-6], "--pattern", r"^(?P<user>nobody)/(?P<file>.*)"]) == 1
    # Not anchored: a search could find an owner's id anywhere, the uploaded name included.
    assert main([*argv[:-6], "--pattern", r"(?P<user>[a-z]+)/(?P<file>.*)"]) == 2


def test_copies_and_names_of_no_exercise_are_not_collected(tmp_path: Path) -> None:
    """Jupyter's copy (02_mini-Copy1) was collected as an exercise of its own, where a
    browser's '02_mini (1)' was refused: every copy is refused, naming the notebook it copies,
    and with --source a name of no exercise is refused as grade refuses it."""
    download = write_zip(tmp_path / "c.zip", [
        ("smithalice_101_5001_02_mini.ipynb", notebook()),
        ("smithalice_101_5001_02_mini-Copy1.ipynb", notebook("wrong")),
        ("smithalice_101_5001_scratch.ipynb", notebook()),
        ("jonesbob_102_5002_02_mini (1).ipynb", notebook()),
        ("jonesbob_102_5002_02_mini-Copy2-1.ipynb", notebook()),  # a resubmitted copy
    ])
    people = read_lms_roster(roster(tmp_path / "r.csv"))
    pattern = formats.compile_pattern("canvas")
    found = collect_downloads("canvas", [download], people, tmp_path / "a", pattern=pattern)
    assert sorted(collected(tmp_path / "a")) == [("alice", MINI), ("alice", "scratch")]
    copies = {line.member: line.message for line in found.problems if line.status == "copy"}
    assert sorted(copies) == ["jonesbob_102_5002_02_mini (1).ipynb",
                              "jonesbob_102_5002_02_mini-Copy2-1.ipynb",
                              "smithalice_101_5001_02_mini-Copy1.ipynb"]
    assert all(f"of {MINI}.ipynb, not an exercise of its own" in m for m in copies.values())
    assert "Jupyter's copy" in copies["smithalice_101_5001_02_mini-Copy1.ipynb"]
    assert "'02_mini-Copy1.ipynb' is" in copies["smithalice_101_5001_02_mini-Copy1.ipynb"]
    assert "browser" in copies["jonesbob_102_5002_02_mini (1).ipynb"]
    assert [line.status for line in found.problems] == ["copy"] * 3

    # With the source's exercises, a name of none of them is not collected either.
    corpus.write_source(tmp_path / "source", corpus.source())
    argv = ["lms", "collect", "canvas", str(download), "--roster", str(tmp_path / "r.csv"),
            "--out", str(tmp_path / "b"), "--source", str(tmp_path / "source"), "--report",
            str(tmp_path / "report.csv")]
    assert main(argv) == 0
    assert sorted(collected(tmp_path / "b")) == [("alice", MINI)]
    lines = {line[1]: line for line in read_csv(tmp_path / "report.csv")[1:]}
    assert lines["smithalice_101_5001_scratch.ipynb"][5:] == [
        "not an exercise", f"'scratch.ipynb' matches no source notebook ({MINI}); "
        "not collected"]
    assert lines["smithalice_101_5001_02_mini-Copy1.ipynb"][5] == "copy"
    assert main([*argv[:-2], "--as", "nope"]) == 2  # --as names no exercise of the source
    assert main([*argv[:-3], str(tmp_path / "nowhere")]) == 2  # no source there


def test_formats_recognise_copies() -> None:
    for stem, of in [("05_x-Copy1", "05_x"), ("05_x (2)", "05_x"), ("05_x(1)", "05_x"),
                     ("Copy of 05_x", "05_x"), ("05_x - Copy (2)", "05_x"),
                     ("05_x copy 2", "05_x"), ("Copy of 05_x-Copy1 (1)", "05_x")]:
        copy = formats.copy_of(stem)
        assert copy is not None and copy.of == of, stem
    for stem in ("05_x", "05_x-1", "05_x-Copy", "(1)", "copy"):
        assert formats.copy_of(stem) is None, stem


def write_grades(folder: Path, lines: list[list[str]]) -> Path:
    folder.mkdir()
    csv_file(folder / "grades.csv", ["student", "exercise", "part", "points", "max_points",
                                     "status"], lines)
    return folder


def test_canvas_ids_learned_at_collect_reach_the_export(tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]
                                                          ) -> None:
    """carol has no canvas_id on the roster; collect matched Canvas user 103 to her through
    the metadata's SIS id, and export gave her an empty ID: the ids collect learned are
    recorded in OUT and fill Canvas's id columns, the roster's where none was learned."""
    people = roster(tmp_path / "r.csv")
    download = write_zip(tmp_path / "c.zip", [("diazcarol_103_5003_02_mini.ipynb", notebook()),
                                              ("smithalice_101_5001_02_mini.ipynb", notebook())])
    csv_file(tmp_path / "subs.csv", ["user_id", "submitted_at", "sis_user_id", "login_id"],
             [["103", "2026-03-01T12:00:00Z", "S003", "cdiaz"]])
    subs = tmp_path / "subs"
    assert main(["lms", "collect", "canvas", str(download), "--roster", str(people), "--out",
                 str(subs), "--metadata", str(tmp_path / "subs.csv")]) == 0
    assert "recorded the Canvas ids of 2 student(s)" in capsys.readouterr().out
    assert read_csv(subs / "canvas_ids.csv") == [
        ["id", "canvas_id", "sis_user_id", "sis_login_id"], ["alice", "101", "", ""],
        ["carol", "103", "S003", "cdiaz"]]
    grades = write_grades(tmp_path / "grades", [["alice", MINI, "a", "1", "2", "passed"],
                                                ["carol", MINI, "a", "2", "2", "passed"]])
    out = tmp_path / "canvas.csv"
    export = ["lms", "export", "canvas", str(grades), "--roster", str(people), "--out", str(out)]
    assert main([*export, "--collected", str(subs)]) == 0
    by_name = {line[0]: line for line in read_csv(out)[2:]}
    assert by_name["Diaz, Carol"][:5] == ["Diaz, Carol", "103", "S003", "cdiaz", "Sec A"]
    assert by_name["Smith, Alice"][1] == "101"
    assert "warning" not in capsys.readouterr().err

    # Without what collect learned: the roster's ids, and one warning naming who has no ID.
    assert main(export) == 0
    assert {line[0]: line[1] for line in read_csv(out)[2:]}["Diaz, Carol"] == ""
    warned = capsys.readouterr().err.splitlines()
    assert warned == ["warning: 1 line(s) with an empty ID (Canvas's user id), which Canvas "
                      "matches by SIS User ID or SIS Login ID alone: carol; give --collected "
                      "with the folder lms collect wrote, or fill the roster's canvas_id to "
                      "match them by ID"]

    # Canvas later maps another user to carol: two ids of one student, recorded for neither.
    csv_file(tmp_path / "subs2.csv", ["user_id", "sis_user_id"], [["104", "S003"]])
    again = write_zip(tmp_path / "d.zip", [("diazcarol_104_6003_03_other.ipynb", notebook())])
    found = collect_downloads("canvas", [again], read_lms_roster(people), subs,
                              metadata=metadata.read_canvas(tmp_path / "subs2.csv"),
                              pattern=formats.compile_pattern("canvas"))
    conflict = [line for line in found.lines if line.status == "id conflict"]
    assert [(line.student, line.download) for line in conflict] == [("carol", "canvas_ids.csv")]
    assert "two canvas_ids (103, 104)" in conflict[0].message
    assert read_csv(subs / "canvas_ids.csv")[2] == ["carol", "", "S003", "cdiaz"]


def test_the_recorded_canvas_ids_are_read_strictly(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    people = roster(tmp_path / "r.csv")
    grades = write_grades(tmp_path / "grades", [["alice", MINI, "a", "1", "2", "passed"]])
    subs = tmp_path / "subs"
    subs.mkdir()
    export = ["lms", "export", "canvas", str(grades), "--roster", str(people), "--out",
              str(tmp_path / "x.csv"), "--collected", str(subs)]
    bad = {"header": ("id,canvas_id\nalice,101\n", "header"),
           "digits": ("id,canvas_id,sis_user_id,sis_login_id\nalice,10x,,\n",
                      "line 2: '10x' is not a canvas_id"),
           "shared": ("id,canvas_id,sis_user_id,sis_login_id\nalice,7,,\nbob,7,,\n",
                      "line 3: alice and bob share the canvas_id '7'"),
           "twice": ("id,canvas_id,sis_user_id,sis_login_id\nalice,7,,\nalice,8,,\n",
                     "line 3: alice appears twice"),
           "cells": ("id,canvas_id,sis_user_id,sis_login_id\nalice,7,,,x\n", "line 2: not 4"),
           "name": ("id,canvas_id,sis_user_id,sis_login_id\n../x,7,,\n", "not a student")}
    for text, said in bad.values():
        (subs / "canvas_ids.csv").write_text(text)
        assert main(export) == 2
        err = capsys.readouterr().err
        assert "canvas_ids.csv" in err and said in err, err
        with pytest.raises(CollectError, match=r"canvas_ids\.csv"):
            collect_downloads("canvas", [], read_lms_roster(people), subs,
                              pattern=formats.compile_pattern("canvas"))
    (subs / "canvas_ids.csv").unlink()
    assert main(export) == 2
    assert "canvas_ids.csv" in capsys.readouterr().err


# --------------------------------------------------------------------------- round trips


def grade(submissions: Path, tmp_path: Path, *extra: str) -> Path:
    corpus.write_source(tmp_path / "source", corpus.source())
    out = tmp_path / "grades"
    assert main(["grade", str(submissions), "--source", str(tmp_path / "source"), "--out",
                 str(out), "--jobs", "2", "--timeout", "15", "--memory", "2048",
                 *extra]) == 0
    return out


def test_canvas_round_trip(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Download -> collect -> grade (late: zero) -> Canvas gradebook import, read back."""
    download = write_zip(tmp_path / "submissions.zip", [
        ("smithalice_101_5001_02_mini.ipynb", notebook("wrong")),
        ("smithalice_101_5001_02_mini-1.ipynb", notebook("good")),
        ("jones=hyperlinkhttpx_LATE_102_5002_02_mini.ipynb", notebook("good")),
        ("jones=hyperlinkhttpx_LATE_102_5002_timestamp.txt", b"2026-02-01 00:00:00 UTC"),
        # Hostile members cost their own lines; the batch grades the others as ever.
        ("../diazcarol_103_5003_02_mini.ipynb", notebook("good")),
        ("diazcarol_103_5003_02_mini.ipynb", b"/etc/passwd"),
    ], modes={"diazcarol_103_5003_02_mini.ipynb": 0o120777})
    csv_file(tmp_path / "subs.csv", ["user_id", "submitted_at", "attempt"],
             [["101", "2026-03-01T20:00:00Z", "2"], ["102", "2026-03-02T09:00:00Z", "1"]])
    people = roster(tmp_path / "roster.csv")
    subs = tmp_path / "subs"
    assert main(["lms", "collect", "canvas", str(download), "--roster", str(people), "--out",
                 str(subs), "--metadata", str(tmp_path / "subs.csv"), "--report",
                 str(tmp_path / "report.csv")]) == 0
    said = capsys.readouterr().out
    assert "collected 2 notebook(s) of 2 student(s)" in said
    assert "older resubmission" in said and "not a notebook" in said
    assert "'..'" in said and "symbolic link" in said
    report = read_csv(tmp_path / "report.csv")
    assert report[0][:2] == ["download", "member"] and len(report) == 7

    grades = grade(subs, tmp_path, "--due", "2026-03-01T23:59", "--late", "zero",
                   "--roster", str(people))
    out = tmp_path / "canvas.csv"
    assert main(["lms", "export", "canvas", str(grades), "--roster", str(people), "--out",
                 str(out), "--column", f"{MINI}=Mini exercise (1234)"]) == 0
    lines = read_csv(out)
    assert lines[0] == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section",
                        "Mini exercise (1234)"]
    assert lines[1] == ["    Points Possible", "", "", "", "", "2.0"]
    by_id = {line[1]: line for line in lines[2:]}
    assert by_id["101"] == ["Smith, Alice", "101", "S001", "asmith", "Sec A", "2.0"]
    # bob: full marks, but late (by the LMS's time, not his file's): zero. The name is inert.
    assert by_id["102"] == ["'=HYPERLINK(\"http://x\"), Bob", "102", "S002", "bjones", "Sec B",
                            "0.0"]
    assert by_id[""] == ["Diaz, Carol", "", "S003", "cdiaz", "Sec A", "0.0"]  # missing: 0
    # carol's Canvas id is known to neither the roster nor collect (her file was refused): the
    # one warning says so, for her alone
    warnings = [line for line in capsys.readouterr().err.splitlines() if "warning" in line]
    assert len(warnings) == 1 and "1 line(s) with an empty ID" in warnings[0] \
        and ": carol;" in warnings[0], warnings


def test_moodle_round_trip(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A Moodle zip (a folder per submission, and the flattened form) -> collect -> grade ->
    Moodle grade import by e-mail with feedback, read back."""
    download = write_zip(tmp_path / "moodle.zip", [
        ("Alice Smith_1234567_assignsubmission_file_/02_mini.ipynb", notebook("good")),
        ("Bob Jones_7654321_assignsubmission_file_02_mini.ipynb", notebook("wrong")),
        ("Bob Jones_7654321_assignsubmission_onlinetext_onlinetext.html", b"<p>hi</p>"),
    ])
    sheet = csv_file(tmp_path / "worksheet.csv",
                     ["Identifier", "Full name", "Email address", "Status",
                      "Last modified (submission)"],
                     [["Participant 1234567", "Alice Smith", "alice@uni.example", "Submitted",
                       "Sunday, 1 March 2026, 10:00 AM"],
                      ["Participant 7654321", "Bob Jones", "bob@uni.example", "Submitted",
                       "Sunday, 1 March 2026, 11:00 AM"]])
    people = roster(tmp_path / "roster.csv")
    subs = tmp_path / "subs"
    assert main(["lms", "collect", "moodle", str(download), "--roster", str(people), "--out",
                 str(subs), "--metadata", str(sheet), "--timezone", "Europe/Berlin"]) == 0
    assert sorted(collected(subs)) == [("alice", MINI), ("bob", MINI)]
    assert timestamp_of(subs / "submitted" / "alice" / MINI)[0] == \
        datetime(2026, 3, 1, 9, 0, tzinfo=UTC)
    grades = grade(subs, tmp_path)
    out = tmp_path / "moodle.csv"
    assert main(["lms", "export", "moodle", str(grades), "--roster", str(people), "--out",
                 str(out), "--feedback", "--column", f"{MINI}=Mini"]) == 0
    lines = read_csv(out)
    assert lines[0] == ["Email address", "Mini", "Mini feedback"]
    by_email = {line[0]: line for line in lines[1:]}
    assert by_email["alice@uni.example"][1] == "2.0"
    assert by_email["Bob@Uni.example"][1] == "1.0"
    assert "ex02.gflops 0/1 failed" in by_email["Bob@Uni.example"][2]
    assert by_email["carol@uni.example"][1:] == ["", ""]  # not graded: left as it is
    assert main(["lms", "export", "moodle", str(grades), "--roster", str(people), "--out",
                 str(out), "--identifier", "id_number"]) == 0
    assert [line[:2] for line in read_csv(out)] == [["ID number", MINI], ["N-1", "2.0"],
                                                    ["N-2", "1.0"], ["N-3", ""]]
    capsys.readouterr()
    # A student the LMS could not match gets no line, and a warning; so does one not listed.
    fewer = csv_file(tmp_path / "fewer.csv", ["id", "email"], [["alice", ""], ["carol", "c@x"]])
    assert main(["lms", "export", "moodle", str(grades), "--roster", str(fewer), "--out",
                 str(out)]) == 0
    assert read_csv(out) == [["Email address", MINI], ["c@x", ""]]
    warned = capsys.readouterr().err
    assert "alice: the roster has no email" in warned and "bob: graded but not on" in warned
