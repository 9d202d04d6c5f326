"""The course config (edu-dl.toml): what every run repeats, in one file that a flag overrides.

Nothing here grades: the parser's results are read, or the handler is replaced."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from edu_dl.cli import build_parser, main
from edu_dl.grading.term import cli as term_cli
from edu_dl.grading.term.config import ConfigError, prepare, settle

COURSE = """\
[course]
source = "solutions"
roster = "students.csv"

[grade]
out = "grades"
late-cap = "50%"
exercise = ["01_a", "02_b"]
"""


def parse(argv: list[str]) -> argparse.Namespace:
    """What main() would hand the command's handler."""
    parser = build_parser()
    config = prepare(parser, argv)
    args = parser.parse_args(argv)
    settle(parser, argv, args, config)
    return args


@pytest.fixture
def course(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "edu-dl.toml").write_text(COURSE)
    return tmp_path


def write(folder: Path, text: str) -> None:
    (folder / "edu-dl.toml").write_text(text)


def test_the_file_fills_what_every_run_repeated_and_required_options_are_satisfied(
        course: Path) -> None:
    args = parse(["grade", "submissions"])
    assert args.source == Path("solutions") and args.out == Path("grades")
    assert args.roster == Path("students.csv") and args.late_cap == "50%"
    assert args.exercises == ["01_a", "02_b"]
    assert args.jobs == 1 and args.due is None  # neither in the file: argparse's default


def test_a_flag_wins_over_the_command_table_which_wins_over_course(course: Path) -> None:
    write(course, COURSE + 'source = "private"\njobs = 3\n')  # [grade] source over [course]
    args = parse(["grade", "submissions"])
    assert args.source == Path("private") and args.jobs == 3
    args = parse(["grade", "submissions", "--source", "other", "--jobs", "2",
                  "--exercise", "03_c"])
    assert args.source == Path("other") and args.jobs == 2
    assert args.exercises == ["03_c"]  # a repeated flag replaces the file's list, not added to
    assert parse(["validate", "x.ipynb"]).source == Path("solutions")  # [course] alone


def test_without_a_file_nothing_changes_and_required_options_stay_required(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert parse(["grade", "s", "--source", "a", "--out", "b"]) == \
        build_parser().parse_args(["grade", "s", "--source", "a", "--out", "b"])
    with pytest.raises(SystemExit):
        parse(["grade", "submissions"])


def test_no_config_ignores_the_file(course: Path) -> None:
    write(course, "[grade]\njobs = 0\n")  # would be refused if read
    assert parse(["--no-config", "grade", "s", "--source", "a", "--out", "b"]).jobs == 1
    with pytest.raises(SystemExit):
        parse(["--no-config", "grade", "s"])


def test_paths_are_relative_to_the_files_folder(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "term").mkdir()
    write(tmp_path / "term", COURSE + 'extensions = "/abs/ext.csv"\n')
    monkeypatch.chdir(tmp_path)
    args = parse(["--config", "term/edu-dl.toml", "grade", "s"])
    assert args.source == Path("term/solutions") and args.out == Path("term/grades")
    assert args.extensions == Path("/abs/ext.csv")


@pytest.mark.parametrize(("text", "said"), [
    ("[grade]\njobs = 0\n", "[grade] jobs: must be positive"),
    ("[grade]\njobs = 'four'\n", "[grade] jobs: expected a whole number, got 'four'"),
    ("[report]\nformat = 'xml'\n", "[report] format: invalid choice 'xml'"),
    ("[course]\ntimeout = 'long'\n", "[course] timeout (for edu-dl validate): invalid float"),
    ("[grade]\nretry-timeouts = 'yes'\n", "[grade] retry-timeouts: true or false"),
    ("[grade]\njobs = true\n", "[grade] jobs: a value as typed after the flag"),
    ("[grade]\nforce = true\n", "give --force on the command line"),
])
def test_a_value_the_option_refuses_names_file_table_and_key(course: Path, text: str,
                                                             said: str) -> None:
    write(course, text)
    with pytest.raises(ConfigError, match=r"edu-dl\.toml") as refused:
        parse(["grade", "s"])
    assert said in str(refused.value)


def test_an_unknown_key_or_table_is_refused_with_the_known_ones(course: Path) -> None:
    write(course, "[grade]\nlate-cpa = '50%'\n")
    with pytest.raises(ConfigError) as refused:
        parse(["grade", "s"])
    assert "edu-dl.toml [grade] late-cpa: not an option of edu-dl grade" in str(refused.value)
    assert "late-cap" in str(refused.value) and "retry-timeouts" in str(refused.value)
    write(course, "[grading]\njobs = 2\n")
    with pytest.raises(ConfigError, match=r"unknown table \[grading\].*\[lms\.collect\]"):
        parse(["grade", "s"])
    write(course, "jobs = 2\n")
    with pytest.raises(ConfigError, match="outside any table"):
        parse(["grade", "s"])


def test_underscores_spell_the_same_key_and_switches_take_booleans(course: Path) -> None:
    write(course, "[grade]\nlate_cap = '2'\nretry_timeouts = true\n"
          "[assign]\nno-run-solutions = true\n")
    args = parse(["grade", "s", "--source", "a", "--out", "b"])
    assert args.late_cap == "2" and args.retry_timeouts is True
    assert parse(["assign", "a", "b"]).run_solutions is False
    assert parse(["assign", "a", "b"]).check is False


def test_course_out_is_the_grading_folder_not_lms_outputs(course: Path) -> None:
    write(course, "[course]\nout = 'grades'\nroster = 'r.csv'\n")
    with pytest.raises(SystemExit):  # lms collect's --out is the submissions folder: still asked
        parse(["lms", "collect", "canvas", "dl.zip"])
    write(course, "[lms.collect]\nout = 'submitted'\nroster = 'r.csv'\n")
    args = parse(["lms", "collect", "canvas", "dl.zip"])
    assert args.out == Path("submitted") and args.roster == Path("r.csv")


def test_a_flag_of_an_exclusive_group_drops_the_files_other_choice(course: Path) -> None:
    write(course, COURSE + "scheduler = 'tls://grader:8786'\n")
    assert parse(["grade", "s"]).scheduler == "tls://grader:8786"
    args = parse(["grade", "s", "--local-cluster", "2"])
    assert args.local_workers == 2 and args.scheduler is None


def test_a_link_is_not_followed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "real.toml").write_text(COURSE)
    (tmp_path / "edu-dl.toml").symlink_to(tmp_path / "real.toml")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match="symbolic link"):
        parse(["grade", "s"])


def test_a_toml_syntax_error_names_the_file_and_line(course: Path) -> None:
    write(course, "[grade]\njobs = 2\nlate = per-day\n")
    with pytest.raises(ConfigError, match=r"edu-dl.toml: not valid TOML: .*line 3"):
        parse(["grade", "s"])


def test_a_named_config_must_exist(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["--config", "missing.toml", "grade", "s"]) == 2
    assert "missing.toml" in capsys.readouterr().err


def test_main_hands_the_merged_options_to_the_command(
        course: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    seen: list[argparse.Namespace] = []
    monkeypatch.setattr(term_cli, "run_grade", lambda args: seen.append(args) or 0)
    assert main(["grade", "submissions", "--jobs", "2"]) == 0
    assert seen[0].source == Path("solutions") and seen[0].jobs == 2
    write(course, "[grade]\nmemory = -1\n")
    assert main(["grade", "submissions"]) == 2 and not seen[1:]
    assert "edu-dl.toml [grade] memory: must be positive" in capsys.readouterr().err


def test_edu_dl_config_shows_each_value_and_where_it_came_from(
        course: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "grade", "--jobs", "4"]) == 0
    lines = {line.split()[0]: line.split(None, 2)[1:] for line in
             capsys.readouterr().out.splitlines()[1:]}
    assert lines["--source"] == ["solutions", "edu-dl.toml [course] line 2"]
    assert lines["--out"] == ["grades", "edu-dl.toml [grade] line 6"]
    assert lines["--jobs"] == ["4", "flag"]
    assert lines["--force"] == ["false", "default"]
    assert main(["config"]) == 0
    shown = capsys.readouterr().out
    assert "source = 'solutions'  (line 2)  -> edu-dl validate, grade, replay, mark, " \
        "lms collect" in shown
    assert main(["config", "lms", "export"]) == 0
    assert "--roster" in capsys.readouterr().out
    assert main(["--no-config", "config"]) == 0
    assert "no course config" in capsys.readouterr().out


def test_mark_has_its_table_and_otherwise_follows_grade(
        course: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """edu-dl mark works on grade's folder: its own table wins, then grade's settings of the
    keys they share (db, source, roster, grade's manual as mark's sheet), then [course]; and
    edu-dl config mark says where each came from."""
    write(course, '[course]\nsource = "solutions"\ndb = "sqlite:////srv/course.db"\n'
          'roster = "students.csv"\n\n[grade]\nmanual = "sheets/filled.csv"\n'
          'db = "sqlite:////srv/grade.db"\n\n[mark]\nport = 9123\nanonymous = true\n'
          'overrides = true\n')
    args = parse(["mark", "grades"])
    assert (args.port, args.anonymous, args.overrides, args.no_browser) == (9123, True, True,
                                                                            False)
    assert args.sheet == Path("sheets/filled.csv")  # grade's manual
    assert args.db == "sqlite:////srv/grade.db"  # grade's table over [course]
    assert (args.source, args.roster) == (Path("solutions"), Path("students.csv"))
    assert main(["config", "mark", "grades", "--port", "9000"]) == 0
    lines = {line.split()[0]: line.split(None, 2)[1:] for line in
             capsys.readouterr().out.splitlines()[1:]}
    assert lines["--port"] == ["9000", "flag"]
    assert lines["--anonymous"] == ["true", "edu-dl.toml [mark] line 12"]
    assert lines["--sheet"] == ["sheets/filled.csv", "edu-dl.toml [grade] line 7"]
    assert lines["--db"] == ["sqlite:////srv/grade.db", "edu-dl.toml [grade] line 8"]
    assert lines["--source"] == ["solutions", "edu-dl.toml [course] line 2"]
    assert lines["--no-browser"] == ["false", "default"]
    assert main(["config"]) == 0
    shown = capsys.readouterr().out
    assert "manual = 'sheets/filled.csv'  (line 7)  -> edu-dl grade, mark" in shown
    assert "port = 9123  (line 11)  -> edu-dl mark" in shown
    # Its own table wins over grade's; a key mark does not have is refused in [mark].
    write(course, '[grade]\nmanual = "a.csv"\n[mark]\nsheet = "b.csv"\n')
    assert parse(["mark", "grades"]).sheet == Path("b.csv")
    write(course, '[mark]\njobs = 4\n')
    with pytest.raises(ConfigError, match=r"\[mark\] jobs: not an option of edu-dl mark"):
        parse(["mark", "grades"])


def test_the_instructors_guide_example_is_a_valid_course_config(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    guide = Path(__file__).resolve().parents[2] / "site" / "instructors.md"
    example = guide.read_text().split("```toml\n", 1)[1].split("```", 1)[0]
    write(tmp_path, example)
    monkeypatch.chdir(tmp_path)
    args = parse(["grade", "submissions"])
    assert (args.source, args.out, args.late, args.memory_mb) == \
        (Path("solutions"), Path("grades"), "per-day:10%", 4096)
    assert parse(["lms", "export", "canvas", "grades"]).out == Path("canvas/import.csv")
    assert parse(["replay", "grades", "alice", "06_mlp"]).full is True
    mark = parse(["mark", "grades"])
    assert (mark.anonymous, mark.port, mark.sheet) == (True, 8890, Path("manual-filled.csv"))
