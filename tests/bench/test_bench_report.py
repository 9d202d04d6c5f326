"""The one harness of ``edu-dl bench`` (issue 27): declared benchmarks, one writer, one table.

The compatibility claim can fail: every benchmark runs its command on a fixed result
(``bench_fixed_results``), and each Markdown, CSV and JSON file it writes must equal, byte for
byte, what the per-benchmark writers before the harness wrote for the same result
(``tests/bench_golden/``).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
from fixtures.bench_fixed_results import COMMANDS, DATA_FILES, run_all

from edu_dl.bench import cli as bench_cli
from edu_dl.bench.report import (
    Benchmark,
    Csv,
    Json,
    Refused,
    Report,
    write_csv,
)
from edu_dl.machine import doctor
from edu_dl.util.tables import markdown_table, table

GOLDEN = Path(__file__).resolve().parents[1] / "fixtures" / "bench_golden"
# The exit codes of the commands before the harness, on the fixed results: matmul and kernels
# report a failed target, twins a twin that could not run.
EXIT_CODES = {"engine": 0, "plan": 0, "matmul": 1, "loader": 0, "transfer": 0, "kernels": 1,
              "conv": 0, "parallel": 0, "twins": 1}


@pytest.fixture(scope="session")  # see tests/README.md: "Fixtures"
def written(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, int]]:
    out = tmp_path_factory.mktemp("bench")
    return out, run_all(out)


def test_every_benchmark_is_declared_on_the_harness() -> None:
    declared = {add.__self__.name for add in bench_cli.BENCHMARKS
                if isinstance(getattr(add, "__self__", None), Benchmark)}
    assert set(COMMANDS) <= declared


@pytest.mark.slow  # 2 s or more: make test-fast leaves it to make test
def test_exit_codes_are_the_old_ones(written: tuple[Path, dict[str, int]]) -> None:
    assert written[1] == EXIT_CODES


@pytest.mark.slow  # 2 s or more: make test-fast leaves it to make test
@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_files_are_byte_for_byte_the_old_writers(
    name: str, written: tuple[Path, dict[str, int]]
) -> None:
    out = written[0] / name
    golden = sorted(p.name for p in (GOLDEN / name).iterdir())
    data = sorted(p.name for p in out.iterdir() if p.suffix in DATA_FILES)
    assert data == golden
    for file in golden:
        assert (out / file).read_bytes() == (GOLDEN / name / file).read_bytes(), file


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_a_benchmark_writes_exactly_the_files_it_declares(
    name: str, written: tuple[Path, dict[str, int]]
) -> None:
    bench = next(add.__self__ for add in bench_cli.BENCHMARKS
                 if getattr(getattr(add, "__self__", None), "name", None) == name)
    assert sorted(p.name for p in (written[0] / name).iterdir()) == sorted(
        [f"{name}.md", *bench.files])
    for png in (p for p in (written[0] / name).iterdir() if p.suffix == ".png"):
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# --------------------------------------------------------------------------- the renderers


def test_text_table_left_then_right_aligned_and_doctor_uses_it() -> None:
    rows = [["numpy", "host", "4 KiB", "1.5"], ["torch.cuda", "H2D", "256 MiB", "12.25"]]
    text = table(["library", "dir", "size", "GB/s"], rows, right_from=2)
    assert text.split("\n") == [
        "library     dir      size   GB/s",
        "----------  ----  -------  -----",
        "numpy       host    4 KiB    1.5",
        "torch.cuda  H2D   256 MiB  12.25",
    ]
    assert table(["a", "b"], [["x", "yy"]]) == "a  b\n-  --\nx  yy"
    assert doctor.table is table


def test_markdown_table_alignment_and_empty_cells() -> None:
    assert markdown_table(["part", "time", "share"], [["fwd", "1 µs", "50%"], ["all", "2 µs", ""]],
                          [False, True, True]) == [
        "| part | time | share |", "|---|---:|---:|", "| fwd | 1 µs | 50% |", "| all | 2 µs | |"]


def test_csv_header_comes_from_the_columns_or_the_first_row(tmp_path: Path) -> None:
    assert write_csv(tmp_path / "a.csv", Csv([])).read_bytes() == b""
    assert write_csv(tmp_path / "b.csv", Csv([], ["x", "y"])).read_bytes() == b"x,y\r\n"
    rows = [{"x": 1, "y": 0.5}, {"x": 2}]
    assert write_csv(tmp_path / "c.csv", Csv(rows, ["x", "y"])).read_bytes() == (
        b"x,y\r\n1,0.5\r\n2,\r\n")
    with pytest.raises(ValueError):  # a column nobody declared is a bug, not a silent drop
        write_csv(tmp_path / "d.csv", Csv([{"x": 1, "z": 2}], ["x"]))


# --------------------------------------------------------------------------- a declared benchmark


def _toy(args: argparse.Namespace, device: object) -> Report:
    if args.n > 3:
        raise Refused("edu-dl bench toy: --n above 3 is refused", status=2)
    rows = [{"i": i, "square": i * i} for i in range(args.n)]
    return Report(f"{args.n} squares on the {device.label}\n",  # type: ignore[attr-defined]
                  csv={"toy.csv": Csv(rows)}, json={"toy.json": Json(rows, indent=2,
                                                                     newline=True)},
                  plots={"toy.png": lambda path: path.write_bytes(b"not really a PNG")},
                  status=0 if rows else 1)


TOY = Benchmark("toy", "squares", "Squares, as a benchmark.", _toy,
                files=("toy.csv", "toy.json", "toy.png"),
                flags=lambda p: p.add_argument("--n", type=int, default=2),
                repeats=(5, 1))


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    TOY.add(parser.add_subparsers(dest="bench_command"))
    return parser.parse_args(argv)


def test_a_declared_benchmark_prints_and_writes_its_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = _parse(["toy", "--n", "3", "--out", str(tmp_path / "out")])
    assert args.repeats is None and args.device == "cpu" and not args.quick
    assert args.handler(args) == 0
    out, err = capsys.readouterr()
    assert out == "3 squares on the CPU\n"
    assert err.count("wrote ") == 4
    folder = tmp_path / "out"
    assert (folder / "toy.md").read_text() == out
    assert (folder / "toy.csv").read_bytes() == b"i,square\r\n0,0\r\n1,1\r\n2,4\r\n"
    assert (folder / "toy.json").read_text().endswith("]\n")
    assert json.loads((folder / "toy.json").read_text())[2] == {"i": 2, "square": 4}
    assert (folder / "toy.png").read_bytes() == b"not really a PNG"


def test_a_declared_benchmark_without_out_only_prints_and_keeps_its_status(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    args = _parse(["toy", "--n", "0"])
    assert args.handler(args) == 1
    assert capsys.readouterr().out == "0 squares on the CPU\n"
    assert list(tmp_path.iterdir()) == []


def test_a_refusal_is_one_sentence_and_its_status(capsys: pytest.CaptureFixture[str]) -> None:
    args = _parse(["toy", "--n", "4"])
    assert args.handler(args) == 2
    out, err = capsys.readouterr()
    assert out == "" and err == "edu-dl bench toy: --n above 3 is refused\n"


def test_the_help_lists_the_declared_files(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        _parse(["toy", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "toy.md, toy.csv, toy.json and toy.png" in help_text
