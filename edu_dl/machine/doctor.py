"""``edu-dl doctor``: what this machine is, what it can do at best, which GPUs frameworks see.

One table (or ``--json``): CPU, cores, SIMD, clock, RAM; theoretical peak FLOP/s (cores * clock *
lanes * 2 * FMA units) and memory bandwidth (transfers/s * bus bytes * channels) next to measured
ones; the GPUs that CuPy, PyTorch and TensorFlow each see; and, where none is seen, why.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import textwrap
from typing import Any

from edu_dl.machine import hardware as hw
from edu_dl.machine import probes as gp
from edu_dl.machine.hardware import Fact, machine_label
from edu_dl.util.args import positive
from edu_dl.util.tables import table
from edu_dl.util.units import format_bytes

Subparsers = Any  # argparse's _SubParsersAction is private

PEAK_INPUTS = "the clock may be the base clock, not the turbo clock, or --fma-units is too low"
# Where stdout is not a terminal (a notebook, a file), the page is this wide: a notebook's output
# column (JupyterLab beside its file browser, the course website) shows 80 columns unwrapped.
PAGE_WIDTH = 80
# A terminal wider than this still gets lines short enough to read.
MAX_WIDTH = 120
BANDWIDTH_INPUTS = "check --memory-mts, --channels and the bus width"


# --------------------------------------------------------------------------- flags


def add_machine_flags(parser: argparse.ArgumentParser) -> None:
    """Flags for what the machine does not reveal (shared with ``bench matmul``)."""
    group = parser.add_argument_group("what the machine does not reveal")
    group.add_argument("--fma-units", type=positive(int), metavar="N",
                       help="vector FMA units per core (2 on most recent x86 cores)")
    group.add_argument("--clock-mhz", type=positive(float), metavar="MHZ",
                       help="core clock for the peak (default: from sysfs or /proc/cpuinfo)")
    group.add_argument("--memory-mts", type=positive(float), metavar="MTS",
                       help="memory transfers per second in millions (DDR4-2933: 2933)")
    group.add_argument("--channels", type=positive(int), metavar="N",
                       help="populated memory channels")
    group.add_argument("--bus-bytes", type=positive(int), default=8, metavar="B",
                       help="bytes per transfer per channel (default: 8, a 64-bit DDR channel)")



# --------------------------------------------------------------------------- collect


def compute_facts(args: argparse.Namespace, measure: bool, quick: bool) -> dict[str, Any]:
    """CPU, RAM, theoretical and measured figures, checked against each other."""
    cpu = hw.read_cpu()
    theory, assumed = hw.theoretical_peak(cpu, args.fma_units, args.clock_mhz)
    bandwidth = hw.theoretical_bandwidth(args.memory_mts, args.channels, args.bus_bytes)
    not_run = hw.unknown("not measured (--no-measure)")
    matmul, copy = not_run, not_run
    if measure:
        copy = hw.measure_bandwidth(64 * 2**20 if quick else 256 * 2**20, 3 if quick else 5)
        matmul = hw.measure_matmul(512 if quick else 1024, 3 if quick else 5)
    checks = []
    theory, verdict = hw.check_measured(theory, matmul, "theoretical peak", PEAK_INPUTS)
    checks.append(verdict)
    assumed, verdict = hw.check_measured(
        assumed, matmul, "assumed peak", f"{hw.ASSUMED_FMA_UNITS} FMA units is the wrong guess "
        "for this CPU, or the clock is the base clock, not the turbo clock"
    )
    checks.append(verdict)
    bandwidth, verdict = hw.check_measured(bandwidth, copy, "memory bandwidth", BANDWIDTH_INPUTS)
    checks.append(verdict)
    return {
        "machine": machine_label(cpu),
        "cpu": cpu.as_dict(),
        "ram": hw.read_ram().as_dict(),
        "peak": {"theoretical": theory.as_dict(), "assumed": assumed.as_dict(),
                 "measured_matmul": matmul.as_dict()},
        "bandwidth": {"theoretical": bandwidth.as_dict(), "measured_copy": copy.as_dict()},
        "checks": checks,
    }


def collect(args: argparse.Namespace) -> dict[str, Any]:
    """The whole doctor report as plain data (what --json prints)."""
    # Measure first, probe after: importing TF and torch would steal the cores from the matmul.
    report = compute_facts(args, measure=not args.no_measure, quick=args.quick)
    frameworks = gp.probe_frameworks(args.frameworks, args.timeout)
    driver = gp.nvidia_driver()
    report["frameworks"] = frameworks
    report["nvidia_driver"] = driver
    report["gpu_found"] = any(f.get("gpus") for f in frameworks.values())
    report["gpu_explanation"] = gp.gpu_explanation(frameworks, driver)
    return report


# --------------------------------------------------------------------------- render


def _fact(d: dict[str, Any], fmt: str = "{}") -> str:
    fact = Fact(**d)
    return fact.text(fmt) + (f"  [{fact.source}]" if fact.known and fact.source else "")


def _bytes(d: dict[str, Any]) -> str:
    return format_bytes(d["value"], ".1f") if d["value"] is not None else Fact(**d).text()


def _key_values(title: str, pairs: list[tuple[str, str]], width: int) -> list[str]:
    key_w = max(len(k) for k, _ in pairs)
    out = [title]
    for key, value in pairs:
        wrapped = textwrap.wrap(value, max(30, width - key_w - 4), break_on_hyphens=False) or [""]
        out.append(f"  {key.ljust(key_w)}  {wrapped[0]}")
        out += [f"  {' ' * key_w}  {more}" for more in wrapped[1:]]
    return out


def _gpu_names(gpus: list[dict[str, Any]]) -> str:
    """'2x NVIDIA H100 80GB HBM3' for two of the same, names in order otherwise."""
    names = [g["name"] for g in gpus]
    counts = {n: names.count(n) for n in dict.fromkeys(names)}
    return ", ".join(n if k == 1 else f"{k}x {n}" for n, k in counts.items()) or "none"


def _framework_rows(frameworks: dict[str, dict[str, Any]]
                    ) -> tuple[list[list[str]], list[tuple[str, str]]]:
    """The table's rows, and (framework, note) for the notes under it."""
    rows, notes = [], []
    for name, f in frameworks.items():
        gpus = "(CPU only)" if name == "numpy" else _gpu_names(f.get("gpus", []))
        note = f.get("detail", "")
        if name == "tensorflow" and f.get("status") == "ok":
            note = f"tf.test.gpu_device_name() = {f.get('gpu_device_name')!r}"
            pip = f.get("distributions", {})
            note += "; pip: " + ", ".join(f"{k} {v}" for k, v in pip.items())
        if name == "torch" and f.get("status") == "ok" and not f.get("cuda_build"):
            note = "CPU-only build"
        rows.append([name, str(f.get("status")), str(f.get("version") or "-"), gpus,
                     str(f.get("cuda") or "-"), str(f.get("cudnn") or "-")])
        if note:
            notes.append((name, note[:300]))
    return rows, notes


def page_width() -> int:
    """The terminal's width (at most MAX_WIDTH) where stdout is one, else PAGE_WIDTH."""
    if not sys.stdout.isatty():
        return PAGE_WIDTH
    return min(shutil.get_terminal_size((PAGE_WIDTH, 24)).columns, MAX_WIDTH)


def render(report: dict[str, Any], width: int | None = None) -> str:
    """The report as a page of at most ``width`` columns (default: ``page_width()``)."""
    width = width or page_width()
    cpu, peak, bw = report["cpu"], report["peak"], report["bandwidth"]
    cores = (f"{cpu['physical_cores']['value']} physical, {cpu['logical_cores']['value']} "
             f"logical, {cpu['usable_cores']['value']} usable by this process")
    simd = " ".join(cpu["simd"]) or "none found"
    if cpu["simd_bits"]["value"]:
        simd += f"  ({cpu['simd_bits']['value']}-bit vectors{', FMA' if cpu['fma'] else ''})"
    lines = [f"edu-dl doctor: {report['machine']}", ""]
    lines += _key_values("CPU and memory", [
        ("CPU model", _fact(cpu["model"])), ("architecture", cpu["architecture"]),
        ("cores", cores), ("SIMD", simd), ("clock", _fact(cpu["clock_mhz"], "{:.0f}")),
        ("RAM", _bytes(report["ram"])),
    ], width)
    lines.append("")
    lines += _key_values("Compute, float32", [
        ("theoretical peak", _fact(peak["theoretical"], "{:.1f}")),
        ("assumed peak", _fact(peak["assumed"], "{:.1f}")),
        ("measured matmul", _fact(peak["measured_matmul"], "{:.1f}")),
    ], width)
    lines.append("")
    lines += _key_values("Memory bandwidth", [
        ("theoretical", _fact(bw["theoretical"], "{:.1f}")),
        ("measured copy", _fact(bw["measured_copy"], "{:.1f}")),
    ], width)
    lines += ["", "Checks (measured must never exceed theoretical)"]
    for check in report["checks"]:
        lines += textwrap.wrap(check, width - 2, initial_indent="  - ", subsequent_indent="    ")
    lines += ["", "Frameworks and the GPUs they see"]
    rows, notes = _framework_rows(report["frameworks"])
    lines.append(textwrap.indent(table(
        ["framework", "status", "version", "GPUs seen", "CUDA", "cuDNN"], rows,
        width=width - 2, wrap=3), "  "))
    for name, note in notes:
        lines += textwrap.wrap(f"{name}: {note}", width - 2, break_on_hyphens=False,
                               initial_indent="  ", subsequent_indent="    ")
    driver = report["nvidia_driver"]
    lines += ["", "NVIDIA driver: " + (
        f"{driver['version']} (CUDA up to {driver['max_cuda']})" if driver["present"]
        else "none found")]
    if report["gpu_explanation"]:
        lines += ["", "Why no GPU is seen, and what to check:"]
        lines += textwrap.wrap(report["gpu_explanation"], width - 2,
                               initial_indent="  ", subsequent_indent="  ")
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- the command


def framework_list(text: str) -> list[str]:
    """An argparse type for --frameworks: the comma-separated names, duplicates dropped;
    ArgumentTypeError for none or an unknown one."""
    items = [t.strip() for t in text.split(",") if t.strip()]
    bad = [t for t in items if t not in gp.FRAMEWORKS]
    if bad or not items:
        raise argparse.ArgumentTypeError(
            f"unknown framework(s) {', '.join(map(repr, bad)) or '(none given)'}; "
            f"choose from {','.join(gp.FRAMEWORKS)}"
        )
    return list(dict.fromkeys(items))


def add_doctor(subparsers: Subparsers) -> None:
    """Register ``edu-dl doctor``: what this machine can do."""
    parser = subparsers.add_parser(
        "doctor",
        help="what this machine can do: CPU, RAM, peaks, GPUs each framework sees",
        description="Report CPU, cores, SIMD, clock, RAM, theoretical and measured peak FLOP/s "
        "and memory bandwidth, and the GPUs that CuPy, PyTorch and TensorFlow each see.",
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of the table")
    parser.add_argument("--quick", action="store_true", help="smaller, shorter measurements")
    parser.add_argument("--no-measure", action="store_true",
                        help="skip the bandwidth and matmul measurements")
    parser.add_argument(
        "--frameworks", type=framework_list, default=list(gp.FRAMEWORKS),
        help=f"comma-separated frameworks to probe (default: {','.join(gp.FRAMEWORKS)})",
    )
    parser.add_argument(
        "--timeout", type=positive(float), default=gp.PROBE_TIMEOUT_S, metavar="S",
        help=f"seconds each framework probe may take (default: {gp.PROBE_TIMEOUT_S:g})",
    )
    add_machine_flags(parser)
    parser.set_defaults(handler=run_doctor)


def run_doctor(args: argparse.Namespace) -> int:
    """``edu-dl doctor``: print the report as a page, or as JSON with --json; returns 0."""
    report = collect(args)
    if args.json:
        json.dump(report, sys.stdout, indent=2, default=str)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(render(report))
    return 0
