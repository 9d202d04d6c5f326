"""The course was renumbered: every message that meets an old notebook name or part id says what
it is now, and grades made under the old names are refused, never mixed with new ones.

This file and ``edu_dl/grading/term/renumbered.py`` are the only ones that spell the old names
(a renaming pass over the repository leaves these two alone).
"""

from __future__ import annotations

import re
from functools import partial
from pathlib import Path

import nbformat
import pytest
from fixtures.hostile import corpus
from fixtures.lms_fixtures import ROSTER_HEADER, csv_file, notebook, read_csv, write_zip

from edu_dl.cli import main
from edu_dl.grading.model import BY_HAND, Exercise, Job, Row
from edu_dl.grading.settings import NO_SANDBOX, Settings
from edu_dl.grading.stages import collect
from edu_dl.grading.term import batch, gradebook, manual
from edu_dl.grading.term.lms import export
from edu_dl.grading.term.policy import PolicyError
from edu_dl.grading.term.renumbered import (
    MOVED_PARTS,
    OLD_NOTEBOOKS,
    OLD_PREFIXES,
    explain,
    new_name,
    new_part_id,
    old_grades,
    table,
)

ROOT = Path(__file__).resolve().parents[2]
OLD = "02b_writing_a_gpu_kernel"
NEW = "03_writing_a_gpu_kernel"
CLAUSE = f"{OLD} is this course's old name of {NEW} (the course was renumbered)"


# --------------------------------------------------------------------------- the tables


def test_the_tables_map_every_old_name() -> None:
    assert OLD_NOTEBOOKS == {
        "01_getting_started": "01_getting_started",
        "02_cpu_vs_gpu": "02_cpu_vs_gpu",
        "02b_writing_a_gpu_kernel": "03_writing_a_gpu_kernel",
        "02c_timing_the_gpu": "04_timing_the_gpu",
        "02d_the_gpu_memory_system": "05_the_gpu_memory_system",
        "03_feeding_the_gpu": "06_feeding_the_gpu",
        "04_computational_graphs": "07_computational_graphs",
        "05_autograd_from_scratch": "08_autograd_from_scratch",
        "06_tensorflow": "09_tensorflow",
        "07_pytorch": "10_pytorch",
        "07b_convolutions": "11_convolutions",
        "08_static_vs_dynamic": "12_static_vs_dynamic",
        "08b_caffe_and_the_landscape": "13_caffe_and_the_landscape",
        "08c_compiling_dynamic_code": "14_compiling_dynamic_code",
        "09_shootout": "15_shootout",
        "10_many_devices": "16_many_devices",
        "12_gpu_practice": "17_gpu_practice",
        "13_attention": "18_attention",
    }
    new = list(OLD_NOTEBOOKS.values())
    assert [name[:2] for name in new] == [f"{i:02d}" for i in range(1, 19)]
    # An old name is never another notebook's new name: a name says which it is.
    assert all(old == OLD_NOTEBOOKS[old] or old not in new for old in OLD_NOTEBOOKS)
    assert {old: new_part_id(f"{old}.f") for old in OLD_PREFIXES} == {
        "ex01": "ex01.f", "ex02": "ex02.f", "ex02b": "ex03.f", "ex02d": "ex05.f",
        "ex03": "ex06.f", "ex04": "ex07.f", "ex05": "ex08.f", "ex06": "ex09.f",
        "ex07": "ex10.f", "ex11": "ex11.f", "ex08": "ex12.f", "ex08c": "ex14.f",
        "ex09": "ex15.f", "ex10": "ex16.f", "ex12": "ex17.f", "ex13": "ex18.f"}
    assert MOVED_PARTS == {"ex12.stream_timer": "ex04.stream_timer",
                           "ex03.feed_bytes": "ex09.feed_bytes",
                           "ex08.caffe_forward": "ex13.caffe_forward"}
    assert {old: new_part_id(old) for old in MOVED_PARTS} == MOVED_PARTS
    assert new_part_id("ex12.max_batch") == "ex17.max_batch"
    for name in ("ex99.f", "ex02b", "ex02b.", "stream_timer", "", "02b_writing_a_gpu_kernel"):
        assert new_part_id(name) is None, name
    assert new_name(OLD) == NEW and new_name("ex02b.row_sums") == "ex03.row_sums"


def _part_ids(path: Path) -> set[str]:
    nb = nbformat.read(path, as_version=4)
    text = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    return set(re.findall(r"""check\(\s*["'](ex\w+\.\w+)["']""", text))


def test_every_part_id_of_the_course_gets_its_notebooks_new_number() -> None:
    """Read from the course itself, before or after its notebooks are renamed: each part id
    of a notebook, mapped when the notebook has its old name, starts with the notebook's new
    number (the three moved parts included). A notebook added after the renumbering (numbered
    past its last) has no old name."""
    checked = 0
    last = max(new[:2] for new in OLD_NOTEBOOKS.values())
    for path in sorted((ROOT / "solutions").glob("*.ipynb")):
        stem = path.stem
        renamed = stem in OLD_NOTEBOOKS and OLD_NOTEBOOKS[stem] != stem
        assert renamed or stem in OLD_NOTEBOOKS.values() or stem[:2] > last, \
            f"{stem}: in neither table"
        number = (OLD_NOTEBOOKS[stem] if renamed else stem)[:2]
        for part in _part_ids(path):
            now = new_part_id(part) if stem in OLD_NOTEBOOKS else part
            assert now is not None and now.startswith(f"ex{number}."), (stem, part, now)
            checked += 1
    assert checked > 50


# --------------------------------------------------------------------------- explain()


def test_explain_says_only_what_an_old_name_is_now() -> None:
    known = {NEW, "02_cpu_vs_gpu", "ex03.row_sums", "ex06.prefetch", "ex04.stream_timer"}
    assert explain(OLD, known) == CLAUSE
    assert explain("ex02b.row_sums", known) == (
        "ex02b.row_sums is this course's old name of ex03.row_sums (the course was renumbered)")
    assert "ex04.stream_timer (the course" in explain("ex12.stream_timer", known)
    assert explain("ex03.prefetch", known).endswith("old name of ex06.prefetch (the course "
                                                    "was renumbered)")
    for name in (NEW, "02_cpu_vs_gpu", "ex03.row_sums",  # current names
                 "nope", "", "scratch", "ex99.x",  # unknown ones
                 "05_autograd_from_scratch",  # old, but its new name is not in the course
                 "ex02.gflops"):  # unchanged, and not in the course
        assert explain(name, known) == "", name
    assert explain("01_getting_started", {"01_getting_started"}) == ""
    assert old_grades([OLD, NEW, "06_tensorflow", "mine"], known) == {OLD: NEW}


# --------------------------------------------------------------------------- the messages


def _source(root: Path) -> Path:
    """A tiny course whose one notebook has the new name of an old one."""
    corpus.write_source(root / "source", corpus.source(), NEW)
    return root / "source"


def _batch(root: Path, out: Path, exercises_due: list[str] | None = None) -> batch.Batch:
    request = batch.Request(root / "submissions", _source(root), out, progress=False,
                            exercises_due=exercises_due)
    return batch.Batch(request, Settings(without_sandbox=NO_SANDBOX), None, lambda _: None,
                       None)


def test_a_students_notebook_under_an_old_name_is_told_its_new_one(tmp_path: Path) -> None:
    """Planned only: the row is written before any sandbox starts."""
    (tmp_path / "submissions" / "ann").mkdir(parents=True)
    corpus.write(tmp_path / "submissions" / "ann", corpus.student(), OLD)
    out = tmp_path / "grades"
    _batch(tmp_path, out, [NEW]).plan()
    [row] = gradebook.read_collected(out)["ann"]
    assert (row.exercise, row.status) == (OLD, "not an exercise")
    assert row.message == (f"ann/{OLD}.ipynb matches no source notebook ({NEW}); not graded; "
                           f"{CLAUSE}")

    # The stage alone says what it said before.
    exercises = {NEW: Exercise(NEW, corpus.source(), "x", [])}
    _, [plain] = collect.collect(tmp_path / "submissions", exercises)
    assert plain.message == f"ann/{OLD}.ipynb matches no source notebook ({NEW}); not graded"
    _, [noted] = collect.collect(tmp_path / "submissions", exercises,
                                 partial(explain, known=exercises))
    assert noted.message == row.message


def test_grade_exercise_under_an_old_name(tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "submissions" / "ann").mkdir(parents=True)
    source = _source(tmp_path)
    argv = ["grade", str(tmp_path / "submissions"), "--source", str(source), "--out",
            str(tmp_path / "grades"), "--no-sandbox"]
    assert main([*argv, "--exercise", OLD]) == 2
    err = capsys.readouterr().err
    assert err.strip().splitlines()[-1] == (
        f"edu-dl grade: --exercise {OLD}: no such source notebook with graded cells (the "
        f"source has: {NEW}); {CLAUSE}")
    assert main([*argv, "--exercise", "nope"]) == 2
    assert capsys.readouterr().err.strip().endswith(f"(the source has: {NEW})")
    # Every student sent the old name: nothing is due, and the message says why.
    corpus.write(tmp_path / "submissions" / "ann", corpus.student(), OLD)
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("edu-dl grade: none of the 1 student folder(s) holds a notebook "
                          f"named like a source notebook ({NEW});") and err.endswith(
        f"name the exercises that are due with --exercise; {CLAUSE}")


def test_grade_refuses_an_out_folder_graded_under_old_names(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "submissions" / "ann").mkdir(parents=True)
    corpus.write(tmp_path / "submissions" / "ann", corpus.student(), NEW)
    source = _source(tmp_path)
    out = tmp_path / "grades"
    old = Exercise(OLD, corpus.source(), "x", [])
    gradebook.write_entry(out, Job("ann", old, None, OLD),
                          [Row("ann", OLD, "ex02b.f", 1.0, 1.0, "passed", "")], "k", "b", "s")
    other = Exercise("mine", corpus.source(), "x", [])  # not an old name: kept as today
    gradebook.write_entry(out, Job("bob", other, None, "mine"),
                          [Row("bob", "mine", "p", 1.0, 1.0, "passed", "")], "k", "b", "s")
    before = sorted(p.relative_to(out) for p in out.rglob("*"))
    argv = ["grade", str(tmp_path / "submissions"), "--source", str(source), "--out", str(out),
            "--no-sandbox"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == (
        f"edu-dl grade: {out} holds grades made before the course was renumbered ({OLD} is "
        f"now {NEW}): part ids and hidden cases changed with the numbers, so grade again into "
        f"a new folder: edu-dl grade {tmp_path / 'submissions'} --source {source} --out "
        "NEW_FOLDER")
    assert sorted(p.relative_to(out) for p in out.rglob("*")) == before  # nothing written

    # An entry of an exercise that is no old name of the source's stops nothing.
    gradebook.forget(out, "ann", OLD)
    _batch(tmp_path, out).plan()
    assert (out / ".secret").is_file()


def test_manual_sheet_lines_under_old_names(tmp_path: Path) -> None:
    rows = [Row("ann", NEW, "ex03.row_sums", 0.0, 2.0, manual.NEEDS, "", judged=BY_HAND)]
    sheet = csv_file(tmp_path / "manual.csv", ["student", "exercise", "cell", "points"],
                     [["ann", OLD, "ex02b.row_sums", "1"]])
    with pytest.raises(manual.ManualSheetError) as exc:
        manual.merge(rows, manual.read_sheet(sheet), sheet)
    message = str(exc.value)
    assert message.startswith(f"--manual {sheet}: 1 line(s) name no row of the gradebook "
                              f"(ann/{OLD}/ex02b.row_sums); keep student, exercise and cell")
    assert message.endswith(f"(its part column) have them; {CLAUSE}; ex02b.row_sums is this "
                            "course's old name of ex03.row_sums (the course was renumbered)")


def test_lms_column_and_collected_file_under_old_names(tmp_path: Path) -> None:
    with pytest.raises(PolicyError) as exc:
        export.column_names([NEW], {OLD: "Kernels (12)"})
    assert str(exc.value) == (f"--column {OLD}: no such exercise in grades.csv (it has {NEW}); "
                              f"{CLAUSE}")
    with pytest.raises(PolicyError) as exc:
        export.column_names([NEW], {"nope": "x"})
    assert str(exc.value) == f"--column nope: no such exercise in grades.csv (it has {NEW})"

    source = _source(tmp_path)
    download = write_zip(tmp_path / "c.zip", [(f"smithalice_101_5001_{OLD}.ipynb", notebook())])
    csv_file(tmp_path / "r.csv", ROSTER_HEADER, [
        ["alice", "Alice", "Smith", "alice@uni.example", "101", "S001", "asmith", "A", "N-1"]])
    argv = ["lms", "collect", "canvas", str(download), "--roster", str(tmp_path / "r.csv"),
            "--out", str(tmp_path / "b"), "--source", str(source), "--report",
            str(tmp_path / "report.csv")]
    assert main(argv) == 1  # nothing collected
    [line] = read_csv(tmp_path / "report.csv")[1:]
    assert line[5:] == ["not an exercise", f"'{OLD}.ipynb' matches no source notebook ({NEW}); "
                        f"not collected; {CLAUSE}"]


def test_lms_collect_as_an_old_name(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = _source(tmp_path)
    download = write_zip(tmp_path / "c.zip", [("smithalice_101_5001_mine.ipynb", notebook())])
    csv_file(tmp_path / "r.csv", ROSTER_HEADER, [
        ["alice", "Alice", "Smith", "alice@uni.example", "101", "S001", "asmith", "A", "N-1"]])
    assert main(["lms", "collect", "canvas", str(download), "--roster", str(tmp_path / "r.csv"),
                 "--out", str(tmp_path / "b"), "--source", str(source), "--as", OLD]) == 2
    assert capsys.readouterr().err.strip() == (
        f"edu-dl lms collect: --as {OLD}: no such exercise in the source (it has {NEW}); "
        f"{CLAUSE}")


# --------------------------------------------------------------------------- the guide


def test_the_instructors_guide_has_the_tables() -> None:
    """Between its markers (which a renaming pass leaves alone), as the module has them."""
    text = (ROOT / "site" / "instructors.md").read_text(encoding="utf-8")
    start, end = "<!-- renumbered: start -->", "<!-- renumbered: end -->"
    assert text.count(start) == 1 and text.count(end) == 1
    section = text[text.index(start):text.index(end)]
    assert "\n".join(table()) in section
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    assert len(rows) == len(OLD_NOTEBOOKS) + len(MOVED_PARTS), "rows the module has not"
    assert "--out NEW_FOLDER" in section


def test_replay_of_an_old_name(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = _source(tmp_path)
    (tmp_path / "grades").mkdir()
    assert main(["replay", str(tmp_path / "grades"), "ann", OLD, "--source", str(source)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"edu-dl replay: {tmp_path / 'grades'}") and err.endswith(f"; {CLAUSE}")
    assert main(["replay", str(tmp_path / "grades"), "ann", "nope", "--source", str(source)]) == 2
    assert "renumbered" not in capsys.readouterr().err
