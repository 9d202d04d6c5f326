"""One harness for every ``edu-dl bench`` benchmark, and the one writer of its files.

A benchmark is declared, not wired by hand: a :class:`Benchmark` names its flags, its
``measure(args, device)`` and the files it writes; ``measure`` returns a :class:`Report` (the
text it prints, its CSV tables with their columns, its JSON documents and its plots), and
:meth:`Report.write` writes ``<name>.md`` and every file into ``--out``. ``bench.add(kinds)``
makes its parser with the shared flags of ``common.add_flags``. For example::

    def measure(args, device):
        result = run_kernels(args.kernels, args.sizes, device)
        return Report(kernels_table(result),
                      csv={"kernels.csv": Csv([asdict(r) for r in result.rows])},
                      json={"kernels.json": Json(result.to_json())},
                      status=1 if result.errors else 0)

    KERNELS = Benchmark("kernels", "help", "description", measure, flags=kernel_flags,
                        files=("kernels.csv", "kernels.json"), device="gpu")

Also here: the two table renderers (aligned text and Markdown) and the header of a Markdown
report. Nothing heavy is imported (``common``: argparse types, NumPy, the machine's facts).
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from edu_dl.bench.common import add_flags, device_of, repeats_of
from edu_dl.bench.device import Device

# --------------------------------------------------------------------------- tables


def document(sections: Sequence[str], command: str, date: str, machine: Sequence[str]) -> str:
    """A whole Markdown report: title, command and date, the machine's lines, the sections."""
    parts = [
        "# edu_dl benchmarks",
        "",
        f"Made by `{command}` on {date}. Benchmarks are measurements, never tests: nothing "
        "here asserts a time.",
        "",
        "### Machine",
        "",
        *machine,
        "",
    ]
    text = "\n".join(parts) + "\n"
    for section in sections:
        text += section + "\n"
    return text.rstrip("\n") + "\n"


# --------------------------------------------------------------------------- the files


@dataclass(frozen=True)
class Csv:
    """A CSV table: its rows and columns (None: the first row's keys; no rows, no header)."""

    rows: Sequence[Mapping[str, Any]]
    columns: Sequence[str] | None = None


@dataclass(frozen=True)
class Json:
    """A JSON document, with the indent (and final newline) its readers have always seen."""

    data: Any
    indent: int = 1
    newline: bool = False


@dataclass
class Report:
    """What a benchmark measured, as it prints it and as files (file name -> content)."""

    text: str
    csv: dict[str, Csv] = field(default_factory=dict)
    json: dict[str, Json] = field(default_factory=dict)
    plots: dict[str, Callable[[Path], Any]] = field(default_factory=dict)
    status: int = 0

    def write(self, name: str, out: Path) -> list[Path]:
        """Write ``<name>.md`` (the printed text), the CSV, JSON and PNG files into ``out``."""
        out.mkdir(parents=True, exist_ok=True)
        markdown = out / f"{name}.md"
        markdown.write_text(self.text, encoding="utf-8")
        paths = [markdown]
        for file, table_ in self.csv.items():
            paths.append(write_csv(out / file, table_))
        for file, doc in self.json.items():
            path = out / file
            path.write_text(json.dumps(doc.data, indent=doc.indent) + ("\n" if doc.newline
                                                                      else ""), encoding="utf-8")
            paths.append(path)
        for file, draw in self.plots.items():
            draw(out / file)
            paths.append(out / file)
        return paths


def write_csv(path: Path, table_: Csv) -> Path:
    """Write ``table_`` to ``path`` under a header of its columns (else the first row's keys; an
    empty file when it has neither); returns ``path``."""
    with path.open("w", newline="", encoding="utf-8") as f:
        columns = table_.columns or (list(table_.rows[0]) if table_.rows else None)
        if columns is not None:
            writer = csv.DictWriter(f, fieldnames=list(columns))
            writer.writeheader()
            writer.writerows(table_.rows)
    return path


def finish(name: str, report: Report, out: Path | None) -> list[Path]:
    """Print the report; with a folder, also write its files (and say so on stderr)."""
    sys.stdout.write(report.text)
    if out is None:
        return []
    paths = report.write(name, out)
    for path in paths:
        print(f"wrote {path}", file=sys.stderr)
    return paths


def pyplot() -> Any:
    """matplotlib.pyplot on the non-interactive Agg backend, imported only when a plot is drawn."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


# --------------------------------------------------------------------------- the harness


class Refused(Exception):
    """A benchmark that will not run as asked: its sentence on stderr, and an exit status."""

    def __init__(self, message: str, status: int = 2) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Benchmark:
    """``edu-dl bench <name>``, declared: its flags, its measurement and the files it writes."""

    name: str
    help: str
    description: str
    measure: Callable[[argparse.Namespace, Device], Report]
    files: tuple[str, ...] = ()  # what it writes besides <name>.md (for --help)
    flags: Callable[[argparse.ArgumentParser], object] = lambda parser: None
    repeats: tuple[int, int] | None = None  # (default, with --quick); None: no --repeats
    device: str | None = "cpu"  # --device's default; None: the benchmark decides
    device_help: str = ""
    timeout: bool = False  # a --timeout for its worker processes
    quick: str = ""
    out_default: Path | None = None

    def add(self, kinds: Any) -> argparse.ArgumentParser:
        parser: argparse.ArgumentParser = kinds.add_parser(self.name, help=self.help,
                                                           description=self.description)
        self.flags(parser)
        add_flags(parser, files=and_list([f"{self.name}.md", *self.files]),
                  repeats=self.repeats, device=self.device, device_help=self.device_help,
                  timeout=self.timeout, quick=self.quick, out_default=self.out_default)
        parser.set_defaults(handler=self.run)
        return parser

    def run(self, args: argparse.Namespace) -> int:
        """The handler: the device asked for, the measurement, the report and its files."""
        device = device_of(args, self.name)
        if device is None:
            return 1
        if self.repeats is not None:  # measure sees the repeats to run, --quick or not
            args.repeats = repeats_of(args, *self.repeats)
        try:
            report = self.measure(args, device)
        except Refused as exc:
            print(exc, file=sys.stderr)
            return exc.status
        finish(self.name, report, args.out)
        return report.status


def and_list(names: Sequence[str]) -> str:
    """'a.md, b.csv and c.png'."""
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
