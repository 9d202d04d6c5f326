"""The `edu-dl` command line: version, and clear argparse errors for bad input."""

from __future__ import annotations

import pytest

import edu_dl
from edu_dl.cli import build_parser, main


def run_cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """Exit status, stdout and stderr of `edu-dl ARGV` (argparse exits with SystemExit)."""
    try:
        code = main(argv)
    except SystemExit as exc:
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(["--version"], capsys)
    assert code == 0 and out.strip() == f"edu-dl {edu_dl.__version__}"


def test_a_command_is_required(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli([], capsys)
    assert code == 2 and "required" in err


def test_unknown_subcommand(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(["fly"], capsys)
    assert code == 2 and "invalid choice: 'fly'" in err


def test_unknown_benchmark(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(["bench", "everything"], capsys)
    assert code == 2 and "invalid choice: 'everything'" in err


def test_unknown_size(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(["bench", "engine", "--sizes", "tiny,huge"], capsys)
    assert code == 2
    assert "unknown size 'huge'" in err and "tiny, lecture, lecture_tf, large" in err


def test_unknown_framework(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(["bench", "engine", "--frameworks", "numpy,jax"], capsys)
    assert code == 2 and "unknown framework 'jax'" in err


@pytest.mark.parametrize("repeats", ["0", "two"])
def test_bad_repeats(repeats: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(["bench", "engine", "--repeats", repeats], capsys)
    assert code == 2 and "--repeats" in err


def test_lists_are_parsed_deduplicated_in_order() -> None:
    args = build_parser().parse_args(
        ["bench", "engine", "--sizes", "lecture, tiny,lecture", "--frameworks", "torch"]
    )
    assert args.sizes == ["lecture", "tiny"] and args.frameworks == ["torch"]
    assert args.repeats is None and args.out is None and not args.quick


def test_every_command_has_a_handler() -> None:
    parser = build_parser()
    args = parser.parse_args(["bench", "plan", "--quick"])
    assert callable(args.handler)


def test_threads_option() -> None:
    args = build_parser().parse_args(["bench", "engine", "--threads", "1"])
    assert args.threads == 1
    assert build_parser().parse_args(["bench", "engine"]).threads is None


def test_out_is_a_folder_for_every_benchmark(capsys: pytest.CaptureFixture[str]) -> None:
    for benchmark in ("engine", "plan", "matmul", "loader", "transfer", "twins", "parallel",
                      "kernels", "grading"):
        code, _, err = run_cli(["bench", benchmark, "--out", "RESULTS.md"], capsys)
        assert code == 2 and "--out takes a folder" in err, benchmark
    args = build_parser().parse_args(["bench", "matmul", "--out", "results/matmul"])
    assert str(args.out) == "results/matmul"


def test_the_argparse_types_module_imports_nothing_of_the_package() -> None:
    import ast
    from pathlib import Path

    from edu_dl.util import args

    tree = ast.parse(Path(args.__file__).read_text())
    imported = [node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)]
    imported += [a.name for node in ast.walk(tree) if isinstance(node, ast.Import)
                 for a in node.names]
    assert all(not name.startswith("edu_dl") for name in imported)
    assert not any(isinstance(node, ast.ImportFrom) and node.level for node in ast.walk(tree))
