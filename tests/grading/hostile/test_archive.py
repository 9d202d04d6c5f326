"""Hostile LMS downloads: every attack in an archive costs only its own line of the report.

Each archive holds an honest control (alice's notebook), which must be collected byte for byte
beside the attacks; each attack must be refused (or kept, for an undecodable name) with a line
that says why, and nothing may be written outside the output folder.
"""

from __future__ import annotations

import functools
import os
import stat
import tempfile
import zipfile
from pathlib import Path

import pytest
from fixtures.hostile import corpus
from fixtures.lms_fixtures import (
    MINI,
    ROSTER_HEADER,
    csv_file,
    declare_size,
    notebook,
    rename_raw,
    write_zip,
)
from hypothesis import given
from hypothesis import strategies as st

from edu_dl.grading.term.lms import formats
from edu_dl.grading.term.lms.collect import Collected, collect_downloads
from edu_dl.grading.term.lms.roster import read_lms_roster
from edu_dl.grading.trust.archive import DEFAULT_LIMITS, MB, ArchiveLimits, read_download

GOOD = ("smithalice_101_1_02_mini.ipynb", notebook("good"))
CANVAS = formats.compile_pattern("canvas")


def collect(tmp_path: Path, downloads: list[Path],
            limits: ArchiveLimits = DEFAULT_LIMITS) -> Collected:
    roster = csv_file(tmp_path / "roster.csv", ROSTER_HEADER, [
        ["alice", "Alice", "Smith", "a@x", "101"], ["bob", "Bob", "Jones", "b@x", "102"],
        ["carol", "Carol", "Diaz", "c@x", "103"], ["dave", "Dave", "Müller", "d@x", "104"],
        ["eve", "Eve", "Hacker", "e@x", "105"], ["frank", "Frank", "Fox", "f@x", "106"]])
    return collect_downloads("canvas", downloads, read_lms_roster(roster), tmp_path / "out",
                             pattern=CANVAS, limits=limits)


def written(tmp_path: Path) -> dict[str, bytes]:
    return {p.relative_to(tmp_path / "out" / "submitted").as_posix(): p.read_bytes()
            for p in (tmp_path / "out" / "submitted").rglob("*") if p.is_file()}


def problems(found: Collected) -> dict[str, tuple[str, str]]:
    return {line.member or line.download: (line.status, line.message) for line in found.problems}


def test_each_hostile_member_costs_only_its_own_line(tmp_path: Path) -> None:
    bomb = b" " * (64 * MB)  # 64 MB of spaces: about 64 KB deflated, a ratio of 1000
    corrupt = notebook("good").replace(b'"cells"', b'"cells" ', 1) + b"MARK"
    download = write_zip(tmp_path / "canvas.zip", [
        GOOD,
        ("/tmp/jonesbob_102_2_02_mini.ipynb", notebook()),
        ("../jonesbob_102_2_02_mini.ipynb", notebook()),
        ("sub\\..\\..\\jonesbob_102_2_02_mini.ipynb", notebook()),
        ("jonesbob_102_3_02_mini.ipynb", b"/etc/passwd"),  # a symbolic link
        ("jonesbob_102_4_02_mini-1.ipynb", b""),  # a character device
        ("diazcarol_103_5_02_mini.ipynb", bomb),
        ("diazcarol_103_6_02_mini-1.ipynb", bomb),  # its headers will claim 1,000 bytes
        ("XXXXXXX_104_6_02_mini.ipynb", notebook()),  # renamed to raw Latin-1 bytes below
        ("smithalice_101_7_YYYY.ipynb", notebook("wrong")),  # renamed to \xff\xfe\xff\xfe
        ("hackereve_105_8_02_mini.ipynb", notebook()),
        ("hackereve_105_8_02_mini.ipynb", notebook("wrong")),  # the same name twice
        ("foxfrank_106_9_02_mini.ipynb", corrupt),  # a bad CRC below
        ("smithalice_101_1_notes.pdf", b"%PDF-1.4"),
        ("smithalice_101_1_" + "x" * 1100 + ".ipynb", notebook()),
    ], modes={"jonesbob_102_3_02_mini.ipynb": stat.S_IFLNK | 0o777,
              "jonesbob_102_4_02_mini-1.ipynb": stat.S_IFCHR | 0o666},
        methods={"foxfrank_106_9_02_mini.ipynb": zipfile.ZIP_STORED})
    declare_size(download, "diazcarol_103_6_02_mini-1.ipynb", 1000)
    rename_raw(download, "XXXXXXX", "m\xfcller1".encode("latin-1"))
    rename_raw(download, "YYYY", b"\xff\xfe\xff\xfe")
    data = download.read_bytes()
    download.write_bytes(data.replace(b"MARK", b"MARX"))  # the stored data, not its CRC
    found = collect(tmp_path, [download])

    assert written(tmp_path) == {f"alice/{MINI}/{MINI}.ipynb": GOOD[1],
                                 f"dave/{MINI}/{MINI}.ipynb": notebook()}
    got = problems(found)
    expected = {
        "/tmp/jonesbob_102_2_02_mini.ipynb": ("refused", "an absolute path"),
        "../jonesbob_102_2_02_mini.ipynb": ("refused", "'..'"),
        "sub\\..\\..\\jonesbob_102_2_02_mini.ipynb": ("refused", "'..'"),
        "jonesbob_102_3_02_mini.ipynb": ("refused", "symbolic link"),
        "jonesbob_102_4_02_mini-1.ipynb": ("refused", "not a regular file"),
        "diazcarol_103_5_02_mini.ipynb": ("refused", "is 67108864 bytes, over the limit"),
        # zipfile stops at the claimed size, then finds the CRC wrong
        "diazcarol_103_6_02_mini-1.ipynb": ("refused", "Bad CRC-32"),
        "smithalice_101_7_\\xff\\xfe\\xff\\xfe.ipynb": ("unusable name", "does not name"),
        "hackereve_105_8_02_mini.ipynb": ("refused", "more than once"),
        "foxfrank_106_9_02_mini.ipynb": ("refused", "CRC"),
        "smithalice_101_1_notes.pdf": ("not a notebook", "not an .ipynb"),
        "smithalice_101_1_" + "x" * 1100 + ".ipynb": ("refused", "over 1024 characters"),
    }
    assert set(got) == set(expected)
    for member, (status, words) in expected.items():
        assert got[member][0] == status and words in got[member][1], (member, got[member])
    # The undecodable name was kept (shown with escapes) and its notebook collected.
    dave = next(line for line in found.written if line.student == "dave")
    assert dave.member == "m\\xfcller1_104_6_02_mini.ipynb"
    assert len([line for line in found.problems if "more than once" in line.message]) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["canvas.zip", "out", "roster.csv"]


def test_a_bad_archive_costs_only_its_own_rows(tmp_path: Path) -> None:
    good = write_zip(tmp_path / "good.zip", [GOOD])
    (tmp_path / "corrupt.zip").write_bytes(b"PK\x03\x04 not really a zip" * 100)
    truncated = write_zip(tmp_path / "truncated.zip", [("jonesbob_102_2_02_mini.ipynb",
                                                        notebook())])
    truncated.write_bytes(truncated.read_bytes()[:-30])
    flagged = write_zip(tmp_path / "flagged.zip", [("jonesbob_102_2_\u00e9\u00e9.ipynb",
                                                    notebook())])
    data = flagged.read_bytes()  # UTF-8-flagged, but not UTF-8: zipfile refuses it whole
    flagged.write_bytes(data.replace("\u00e9\u00e9".encode(), b"\xff" * 4))
    os.symlink(good, tmp_path / "link.zip")
    found = collect(tmp_path, [tmp_path / "corrupt.zip", truncated, flagged,
                               tmp_path / "link.zip", good])
    assert written(tmp_path) == {f"alice/{MINI}/{MINI}.ipynb": GOOD[1]}
    got = problems(found)
    assert got["corrupt.zip"][0] == "archive unreadable"
    assert got["truncated.zip"][0] == "archive unreadable"
    assert "marked UTF-8" in got["flagged.zip"][1]
    assert "symbolic link" in got["link.zip"][1]


def test_too_many_members(tmp_path: Path) -> None:
    """Past the limit, members are not looked at (and said so); far past it (as the central
    directory claims), the archive is not opened at all."""
    some = write_zip(tmp_path / "some.zip",
                     [GOOD, *((f"x_9{i}_1_02_mini.ipynb", b"{}") for i in range(7))])
    found = collect(tmp_path, [some], ArchiveLimits(max_members=5))
    assert written(tmp_path) == {f"alice/{MINI}/{MINI}.ipynb": GOOD[1]}
    assert got_status(found, "some.zip") == ("over the limit", "3 members past the limit")
    many = write_zip(tmp_path / "many.zip", [(f"m{i}.txt", b"") for i in range(60)])
    assert "claims 60 members" in read_download(many, ArchiveLimits(max_members=5)).problem
    assert "central directory is" in read_download(
        many, ArchiveLimits(max_directory_bytes=1000)).problem


def got_status(found: Collected, where: str) -> tuple[str, str]:
    line = next(line for line in found.problems if line.download == where and not line.member)
    return line.status, line.message[:len("3 members past the limit")]


@pytest.mark.slow
def test_zip64_member_count_is_read_before_the_archive_is_opened(tmp_path: Path) -> None:
    """65,536 members need zip64's end records: their count is found there too."""
    path = tmp_path / "zip64.zip"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as zf:
        for i in range(1 << 16):
            zf.writestr(f"{i}", b"")
    assert b"PK\x06\x06" in path.read_bytes()[-200:]
    assert "claims 65536 members" in read_download(path, ArchiveLimits(max_members=100)).problem
    assert read_download(path, ArchiveLimits(max_members=7000)).skipped == (1 << 16) - 7000


def test_an_unpacked_folder_follows_no_link_and_opens_no_fifo(tmp_path: Path) -> None:
    folder = tmp_path / "download"
    folder.mkdir()
    (folder / GOOD[0]).write_bytes(GOOD[1])
    (tmp_path / "secret.ipynb").write_text("instructor's")
    os.symlink(tmp_path / "secret.ipynb", folder / "jonesbob_102_2_02_mini.ipynb")
    os.mkfifo(folder / "diazcarol_103_3_02_mini.ipynb")
    (folder / "hackereve_105_4_02_mini.ipynb").write_bytes(b" " * (2 * MB))
    (folder / os.fsdecode(b"m\xfcller1_104_6_02_mini.ipynb")).write_bytes(notebook())
    nested = folder.joinpath(*"abcdefghij")
    nested.mkdir(parents=True)
    (nested / "foxfrank_106_5_02_mini.ipynb").write_bytes(notebook())
    found = collect(tmp_path, [folder], ArchiveLimits(max_member_bytes=MB))
    assert written(tmp_path) == {f"alice/{MINI}/{MINI}.ipynb": GOOD[1],
                                 f"dave/{MINI}/{MINI}.ipynb": notebook()}
    assert "m\\xfcller1_104_6_02_mini.ipynb" in {line.member for line in found.written}
    got = problems(found)
    assert "symbolic link" in got["jonesbob_102_2_02_mini.ipynb"][1]
    assert "not a regular file" in got["diazcarol_103_3_02_mini.ipynb"][1]
    assert "over the limit" in got["hackereve_105_4_02_mini.ipynb"][1]
    assert "nested too deep" in got["a/b/c/d/e/f/g/h/i"][1]


@functools.cache
def _sample() -> bytes:
    with tempfile.TemporaryDirectory() as folder:
        return write_zip(Path(folder) / "sample.zip", [
            GOOD, ("jonesbob_102_2_02_mini.ipynb", b"{}" * 50), ("notes.txt", b"x")],
            methods={"notes.txt": zipfile.ZIP_STORED}).read_bytes()


@given(st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), max_size=8),
       st.integers(0, 10**6))
def test_a_damaged_zip_never_raises(tmp_path_factory: pytest.TempPathFactory,
                                     flips: list[tuple[int, int]], cut: int) -> None:
    """Bytes flipped anywhere (headers, names, sizes, the directory) and the end cut off:
    read_download says what it could not read, and never raises."""
    data = bytearray(_sample())
    for at, value in flips:
        data[at % len(data)] = value
    path = tmp_path_factory.mktemp("fuzz") / "damaged.zip"
    path.write_bytes(bytes(data[:len(data) - cut % 64]))
    download = read_download(path, ArchiveLimits(max_member_bytes=MB))
    assert download.problem or all(m.data is not None or m.problem or
                                   not m.path.endswith(".ipynb") for m in download.members)


def test_the_hostile_corpus_comes_through_a_canvas_download_unchanged(tmp_path: Path) -> None:
    """Every submission of the grader's hostile corpus, zipped as Canvas names it, is collected
    byte for byte (what grading makes of it is test_grade.py::test_hostile_corpus's)."""
    cases = corpus.build(tmp_path / "corpus", tmp_path / "escape")
    people = [[name, "", "", f"{name}@x", str(200 + i)] for i, name in enumerate(cases)]
    members = [(f"{name.replace('_', '')}_{200 + i}_{900 + i}_{MINI}.ipynb", path.read_bytes())
               for i, name in enumerate(cases)
               for path in (tmp_path / "corpus" / "submissions" / name).glob("*.ipynb")]
    download = write_zip(tmp_path / "canvas.zip", members)
    found = collect_downloads(
        "canvas", [download], read_lms_roster(csv_file(tmp_path / "r.csv", ROSTER_HEADER,
                                                       people)),
        tmp_path / "out", pattern=CANVAS)
    assert not found.problems
    assert written(tmp_path) == {
        f"{name}/{MINI}/{MINI}.ipynb": (tmp_path / "corpus" / "submissions" / name /
                                        f"{MINI}.ipynb").read_bytes()
        for name in cases if name != "empty_folder"}
