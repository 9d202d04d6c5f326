"""The `edu-dl` command line: version, and clear argparse errors for bad input."""

from __future__ import annotations

from pathlib import Path

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
                      "kernels"):
        code, _, err = run_cli(["bench", benchmark, "--out", "RESULTS.md"], capsys)
        assert code == 2 and "--out takes a folder" in err, benchmark
    args = build_parser().parse_args(["bench", "matmul", "--out", "results/matmul"])
    assert str(args.out) == "results/matmul"


def test_the_argparse_types_module_imports_nothing_of_the_package() -> None:
    import ast

    from edu_dl.util import args

    tree = ast.parse(Path(args.__file__).read_text())
    imported = [node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)]
    imported += [a.name for node in ast.walk(tree) if isinstance(node, ast.Import)
                 for a in node.names]
    assert all(not name.startswith("edu_dl") for name in imported)
    assert not any(isinstance(node, ast.ImportFrom) and node.level for node in ast.walk(tree))


def _package_imports(package: str) -> dict[str, set[str]]:
    """file -> the edu_dl modules it imports (relative imports resolved), for a subpackage."""
    import ast

    import edu_dl

    root = Path(edu_dl.__file__).parent
    found: dict[str, set[str]] = {}
    for path in sorted((root / package).rglob("*.py")):
        here = ["edu_dl", *path.relative_to(root).with_suffix("").parts[:-1]]
        names: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = here[: len(here) - node.level + 1] if node.level else []
                module = ".".join([*base, *([node.module] if node.module else [])])
                names.update(f"{module}.{a.name}" for a in node.names)
        found[str(path.relative_to(root))] = {n for n in names if n.startswith("edu_dl.")}
    return found


def test_the_course_benchmarks_and_the_grader_do_not_import_each_other() -> None:
    """Grading benchmarks are development tools (tests/bench_grading.py, tests/bench_cluster.py),
    not ``edu-dl bench`` entries; bench.args is the one shared module (it moves to util)."""
    into_grading = {f: sorted(n for n in names if n.startswith("edu_dl.grading"))
                    for f, names in _package_imports("bench").items()}
    into_bench = {f: sorted(n for n in names if n.startswith("edu_dl.bench")
                            and not n.startswith("edu_dl.util.args"))
                  for f, names in _package_imports("grading").items()}
    assert not {f: n for f, n in into_grading.items() if n}
    assert not {f: n for f, n in into_bench.items() if n}
    for gone in ("grading", "grading-cluster"):
        with pytest.raises(SystemExit):
            build_parser().parse_args(["bench", gone])


@pytest.mark.parametrize("module", ["edu_dl.cli", "edu_dl.grading.term.batch"])
def test_reading_notebooks_never_compiles_rfc3987_grammars(module: str) -> None:
    """nbformat's validator pulls in jsonschema, whose IRI format check imports rfc3987_syntax:
    ~40 grammars compiled at import, 1-2 s in every edu-dl command. Importing the command or the
    grader must reach nbformat without it (jsonschema then skips that check, as when the
    package is not installed); the sandbox's runner reads no notebook with nbformat at all
    (grading/test_sandbox.py)."""
    import subprocess
    import sys

    probe = (f"import sys, {module}, nbformat.validator; "
             "print('nbformat' in sys.modules, sys.modules.get('rfc3987_syntax', 'absent'))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=120, check=True)
    assert done.stdout.split() == ["True", "None"], done.stdout + done.stderr


def test_validate_imports_no_page_renderer() -> None:
    """`edu-dl validate` prints its report and renders no feedback page, so neither the command
    nor the grader it runs imports feedback.py's nbconvert and bleach (0.3 s of a student's wait,
    issue 41); `edu-dl grade` imports them when it renders its first page."""
    import subprocess
    import sys

    watched = ("nbconvert", "bleach", "edu_dl.grading.stages.feedback")
    probe = ("import sys, edu_dl.cli, edu_dl.grading.term.validate; "
             f"print(sorted(m for m in {watched!r} if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=120, check=True)
    assert done.stdout.strip() == "[]", done.stdout + done.stderr
