"""Recorded results: ``edu-dl bench gpu`` (``make bench-gpu``) and ``edu-dl bench results``.

``benchmarks/gpu/<device>/`` is the one home of recorded GPU results: one folder per benchmark
(its report ``<name>.md`` and data files) and a ``PROVENANCE`` file of ``key: value`` lines
(device, driver, versions, commit, date, and the command behind each folder). ``edu-dl bench gpu``
runs every GPU benchmark, each in a worker process of its own, within an 8-minute budget, and
replaces the device's folder with what it measured. ``edu-dl bench results`` writes
``benchmarks/RESULTS.md``: the CPU reports of ``benchmarks/cpu/`` and every recorded GPU folder,
each table rendered from its files and labelled with its provenance. ``recorded()`` is how a
lecture reads a recorded result.
"""

from __future__ import annotations

import argparse
import json
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from edu_dl.bench import parallel
from edu_dl.bench.common import add_flags, cpu_name, now, package_version
from edu_dl.bench.device import Device, get_device, why_no_gpu_mode
from edu_dl.bench.engine import EngineResult, check_targets
from edu_dl.bench.loader import LoaderResult, loader_table
from edu_dl.bench.matmul import MatmulResult, render
from edu_dl.bench.transfer import TransferResult, transfer_table
from edu_dl.machine import hardware
from edu_dl.machine.recorded import BENCHMARKS, PROVENANCE, ROOT, read_provenance
from edu_dl.util.args import comma_list
from edu_dl.util.worker import WorkerError, run_in_worker

BUDGET_S = 8 * 60.0  # make bench-gpu must finish within this
# The GPU runs of make bench-gpu, in order, sized to fit the budget on one H100-class GPU.
GPU_RUNS: dict[str, list[str]] = {
    "engine": ["engine", "--repeats", "6", "--processes", "2"],
    "plan": ["plan", "--repeats", "6", "--processes", "2"],
    "kernels": ["kernels"],
    "matmul": ["matmul", "--repeats", "5"],
    "transfer": ["transfer", "--repeats", "3"],
    "loader": ["loader", "--repeats", "2"],
    "twins": ["twins", "--model", "lecture_tf", "--steps", "10"],
    "parallel": ["parallel"],
    "conv": ["conv", "--rounds", "10"],
}


# --------------------------------------------------------------------------- provenance


def write_provenance(folder: Path, facts: dict[str, str], comment: str) -> Path:
    """Write ``folder``/PROVENANCE: ``# comment``, then a ``key: value`` line per fact; its path."""
    path = folder / PROVENANCE
    lines = [f"# {comment}", *(f"{key}: {value}" for key, value in facts.items())]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def slug(name: str) -> str:
    """A folder name for a device: 'NVIDIA H100 80GB HBM3' -> 'nvidia-h100-80gb-hbm3'."""
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "gpu"


def git_commit() -> str:
    """The checkout's short commit, '+changes' when the tree differs from it; or why unknown."""
    try:
        head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, timeout=10, check=True).stdout
        dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain"],
                               capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return "unknown (not a git checkout)"
    return head.strip() + (" +changes" if dirty.strip() else "")


def machine_facts(device: Device) -> dict[str, str]:
    """Device, driver, host, Python and versions, for a PROVENANCE file."""
    from edu_dl.machine.probes import nvidia_driver

    driver = nvidia_driver() if device.runs_on == "gpu" else {}
    gpus = [f"{g['name']} ({g['memory']})" for g in driver.get("gpus", [])]
    packages = ("torch", "cupy-cuda12x", "cupy-cuda13x", "numba", "numba-cuda", "numpy",
                "tensorflow", "tensorflow-cpu")
    versions = [v for v in map(package_version, packages) if "not installed" not in v]
    return {
        "device": ", ".join(gpus) if gpus else device.label,
        "driver": (f"{driver.get('version')}, CUDA up to {driver.get('max_cuda')}"
                   if driver else "none (no GPU)"),
        "host": f"{cpu_name()}, {int(hardware.usable_cores().value)} usable cores",
        "python": platform.python_version(),
        "versions": ", ".join(versions),
        "commit": git_commit(),
        "date": now(),
    }


# --------------------------------------------------------------------------- edu-dl bench gpu


def run_benchmark(argv: list[str], timeout_s: float) -> int:
    """One benchmark's command in a worker process of its own; its exit status."""
    status: int = run_in_worker("edu_dl.cli:main", name=argv[1], timeout_s=timeout_s, argv=argv)
    return status


def record_gpu(out: Path, quick: bool = False, only: list[str] | None = None,
               budget_s: float = BUDGET_S, device: Device | None = None,
               log: Callable[[str], None] = print) -> Path:
    """Run every GPU benchmark into ``out/<device>/``; returns that folder."""
    device = device or Device("gpu")
    facts = machine_facts(device)
    folder = out / slug(facts["device"].split(" (")[0] if device.runs_on == "gpu" else "fake-gpu")
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="edu_dl_record_") as tmp:
        staging = Path(tmp)
        for name, args in GPU_RUNS.items():
            if only and name not in only:
                continue
            command = ["bench", *args, "--device", "gpu", *(["--quick"] if quick else [])]
            facts[f"command {name}"] = "edu-dl " + " ".join(command) + f" --out <device>/{name}"
            left = budget_s - (time.monotonic() - start)
            if left <= 0:
                facts[f"status {name}"] = "skipped: the time budget was spent"
                log(f"bench {name}: skipped, the {budget_s / 60:g}-minute budget was spent")
                continue
            began = time.monotonic()
            try:
                code = run_benchmark([*command, "--no-progress", "--out", str(staging / name)],
                                     left)
                status = "ok" if code == 0 else f"exit status {code}"
            except WorkerError as exc:
                status = f"failed: {exc}"
            seconds = time.monotonic() - began
            facts[f"status {name}"] = f"{status} ({seconds:.0f} s)"
            log(f"bench {name}: {status} ({seconds:.0f} s)")
        facts["total"] = f"{time.monotonic() - start:.0f} s (budget {budget_s:.0f} s)"
        write_provenance(staging, facts, "GPU results recorded by `edu-dl bench gpu` "
                         "(make bench-gpu): each folder is one benchmark's --out")
        out.mkdir(parents=True, exist_ok=True)
        if folder.exists():
            shutil.rmtree(folder)  # one recording per folder: no stale files, one provenance
        shutil.copytree(staging, folder)
    return folder


def add_gpu(kinds: Any) -> None:
    """Register ``edu-dl bench gpu``: every benchmark's GPU mode, recorded into OUT/<device>/."""
    p = kinds.add_parser(
        "gpu", help="record every GPU benchmark into benchmarks/gpu/<device>/ (make bench-gpu)",
        description="Run every benchmark's GPU mode (engine and plan, kernels, matmul, "
        "transfer, loader, twins, parallel, conv) within an 8-minute budget and record the results "
        "with a PROVENANCE file in OUT/<device>/, replacing what was there.")
    p.add_argument("--only", type=_benchmark_list, default=None,
                   help=f"comma-separated, from {','.join(GPU_RUNS)} (default: all)")
    add_flags(p, files="<device>/ with every benchmark's folder and PROVENANCE", device=None,
              out_default=BENCHMARKS / "gpu", quick="every benchmark with --quick (a check)")
    p.set_defaults(handler=run_gpu_command)


def _benchmark_list(text: str) -> list[str]:
    return comma_list(tuple(GPU_RUNS), "benchmark")(text)


def run_gpu_command(args: argparse.Namespace) -> int:
    """``edu-dl bench gpu``: 1 when the GPU mode cannot run (nothing is recorded) or a benchmark
    did not finish ok, else 0."""
    reason = why_no_gpu_mode()
    if reason is not None:
        print(f"edu-dl bench gpu: {reason}, so no GPU benchmark was run and nothing was "
              "recorded.", file=sys.stderr)
        return 1
    folder = record_gpu(args.out, args.quick, args.only, device=get_device("gpu"),
                        log=lambda text: print(text, file=sys.stderr))
    facts = read_provenance(folder)
    print(f"recorded into {folder} ({facts.get('total')})")
    failed = [k for k, v in facts.items() if k.startswith("status ") and not v.startswith("ok")]
    return 1 if failed else 0


# --------------------------------------------------------------------------- reading them back


# --------------------------------------------------------------------------- RESULTS.md


def demote(markdown: str) -> str:
    """Every heading one level down (outside code blocks), to nest a report in another."""
    out, fenced = [], False
    for line in markdown.splitlines():
        fenced ^= line.startswith("```")
        out.append("#" + line if line.startswith("#") and not fenced else line)
    return "\n".join(out) + "\n"


def render_folder(folder: Path, name: str) -> tuple[str, str] | None:
    """(a benchmark folder's report, where it came from): its Markdown, else rendered from its
    JSON by today's renderer; None if neither."""
    report = folder / f"{name}.md"
    if report.is_file():
        return report.read_text(encoding="utf-8"), f"`{name}.md`, as the command printed it"
    data_path = folder / f"{name}.json"
    if not data_path.is_file():
        return None
    data = json.loads(data_path.read_text(encoding="utf-8"))
    how = f"rendered from the recorded `{name}.json` by today's edu_dl"
    if name == "matmul":
        return "```\n" + render(MatmulResult.from_json(data)) + "```\n", how
    if name == "transfer":
        return "```\n" + transfer_table(TransferResult.from_json(data)) + "```\n", how
    if name == "loader":
        return "```\n" + loader_table(LoaderResult.from_json(data)) + "```\n", how
    if name == "parallel":
        rows = [parallel.Row(**r) for r in data]
        return parallel.table(rows, len(rows[0].losses) if rows else 0), how
    return None


def gpu_targets_not_measured() -> str:
    """The engine's GPU targets, every one 'not measured', for a device without an engine run."""
    result = EngineResult([], [], 0, device=Device("gpu"))
    lines = ["| target | measured |", "|---|---|"]
    lines += [f"| {target.text} | not measured |" for target, _, _ in check_targets(result)]
    return "\n".join(lines) + "\n"


def results_markdown(root: Path = BENCHMARKS) -> str:
    """benchmarks/RESULTS.md: the CPU reports, then each GPU device's recorded results."""
    parts = ["# edu_dl benchmarks", "",
             "Written by `edu-dl bench results` from the recorded files under `benchmarks/`: "
             "`make bench` records the CPU part into `benchmarks/cpu/`, `make bench-gpu` a GPU's "
             "into `benchmarks/gpu/<device>/`. Benchmarks are measurements, never tests: "
             "nothing here asserts a time.", "", "## On the CPU", ""]
    for report in sorted((root / "cpu").glob("*.md")):
        parts.append(demote(demote(report.read_text(encoding="utf-8"))))
    for folder in sorted((root / "gpu").glob("*")):
        facts = read_provenance(folder)
        if not facts:
            continue
        parts += [f"## On the GPU: {facts.get('device', folder.name)}", "",
                  "Recorded: " + "; ".join(f"{k} {facts[k]}" for k in
                                           ("date", "commit", "driver", "host", "python",
                                            "versions", "tensorflow") if k in facts)
                  + f". `{folder.relative_to(root)}/{PROVENANCE}` says how.", ""]
        if "not measured" in facts:
            parts += [f"Not measured there: {facts['not measured']}.", ""]
        if not (folder / "engine" / "engine.json").is_file():
            parts += ["### GPU targets of the engine", "",
                      "No `edu-dl bench engine --device gpu` run is recorded for this GPU, so "
                      "every target is not measured (the separate script's figures below are "
                      "its baseline, not a measurement of these targets):", "",
                      gpu_targets_not_measured()]
        for sub in sorted(p for p in folder.iterdir() if p.is_dir()):
            rendered = render_folder(sub, sub.name)
            command = facts.get(f"command {sub.name}", "unknown")
            status = facts.get(f"status {sub.name}")
            parts += [f"### {sub.name}", "", f"Recorded by: {command}."
                      + (f" Status: {status}." if status else "")
                      + (f" Shown: {rendered[1]}." if rendered else ""), ""]
            parts.append(demote(demote(demote(rendered[0]))) if rendered else _files_of(sub))
    return "\n".join(parts).rstrip("\n") + "\n"


def _files_of(folder: Path) -> str:
    """A folder without a report: its text files verbatim, the others listed."""
    out = []
    for path in sorted(folder.iterdir()):
        if path.suffix == ".txt":
            out += [f"`{path.name}`:", "", "```", path.read_text(encoding="utf-8").rstrip(),
                    "```", ""]
        else:
            out.append(f"- `{path.name}`")
    return "\n".join(out) + "\n"


def add_results(kinds: Any) -> None:
    """Register ``edu-dl bench results``: benchmarks/RESULTS.md from the recorded results."""
    p = kinds.add_parser(
        "results", help="write benchmarks/RESULTS.md from the recorded CPU and GPU results",
        description="Assemble benchmarks/RESULTS.md: the CPU reports of benchmarks/cpu/ and "
        "every recorded GPU folder of benchmarks/gpu/, each with its provenance.")
    p.add_argument("--root", type=Path, default=BENCHMARKS,
                   help=f"the benchmarks folder (default: {BENCHMARKS})")
    p.set_defaults(handler=run_results_command)


def run_results_command(args: argparse.Namespace) -> int:
    """``edu-dl bench results``: write RESULTS.md into --root; returns 0."""
    path = args.root / "RESULTS.md"
    path.write_text(results_markdown(args.root), encoding="utf-8")
    print(f"wrote {path}", file=sys.stderr)
    return 0
