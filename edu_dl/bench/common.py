"""What every benchmark shares: its flags (one meaning each), its output folder, formats, timers.

The flags: ``--repeats N`` (timed repeats; the median is reported), ``--quick`` (checks that it
runs, not speed), ``--out DIR`` (always a folder: the benchmark writes ``<name>.md``, the report it
prints, and its CSV, JSON and PNG files there), ``--device cpu|gpu``, ``--timeout S`` (seconds a
worker process may take) and ``--no-progress``.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import sys
from collections.abc import Callable, Iterator, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any, TypeVar

from edu_dl.bench.device import DEVICES, Device, get_device, gpu_name, why_no_gpu_mode
from edu_dl.machine import hardware as hw
from edu_dl.util.args import positive, positive_int
from edu_dl.util.worker import DEFAULT_TIMEOUT_S

T = TypeVar("T")
TIMES = "\u00d7"  # the multiplication sign of ratios, spelled out for linters
FILE_SUFFIXES = (".md", ".csv", ".json", ".png", ".txt")


# --------------------------------------------------------------------------- flags


def out_folder(text: str) -> Path:
    """An argparse type for --out: a folder (created when written), never a file."""
    path = Path(text)
    if path.suffix.lower() in FILE_SUFFIXES or path.is_file():
        raise argparse.ArgumentTypeError(
            f"--out takes a folder (the report and data files are written into it), and "
            f"{text!r} looks like a file; give its folder instead")
    return path


def add_flags(parser: argparse.ArgumentParser, *, files: str,
              repeats: tuple[int, int] | None = None, device: str | None = "cpu",
              device_help: str = "", timeout: bool = False, quick: str = "",
              out_default: Path | None = None) -> None:
    """Add the shared flags; ``repeats`` = (default, with --quick), None: no --repeats."""
    if repeats is not None:
        parser.add_argument("--repeats", type=positive_int, default=None,
                            help=f"timed repeats; the median is reported (default: {repeats[0]}, "
                            f"with --quick {repeats[1]})")
    parser.add_argument("--quick", action="store_true",
                        help=quick or "small and short: checks that it runs, not speed")
    where = f" (default: {out_default})" if out_default else ""
    parser.add_argument("--out", type=out_folder, metavar="DIR", default=out_default,
                        help=f"a folder: write {files} there{where}")
    if device is not None or device_help:
        parser.add_argument("--device", choices=DEVICES, default=device,
                            help=device_help or f"where to run (default: {device}); 'gpu' "
                            "without a GPU says so and exits with status 1")
    if timeout:
        parser.add_argument("--timeout", type=positive(float), default=DEFAULT_TIMEOUT_S,
                            metavar="S", help="seconds one worker process may take "
                            f"(default: {DEFAULT_TIMEOUT_S:g})")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def repeats_of(args: argparse.Namespace, default: int, quick: int) -> int:
    """``--repeats`` when given, else ``quick`` with --quick and ``default`` without."""
    if getattr(args, "repeats", None) is not None:
        return int(args.repeats)
    return quick if args.quick else default


def device_of(args: argparse.Namespace, name: str) -> Device | None:
    """The Device asked for; None (after one sentence on stderr) for 'gpu' without a GPU."""
    kind = getattr(args, "device", None) or "cpu"
    if kind == "gpu":
        reason = why_no_gpu_mode()
        if reason is not None:
            print(f"edu-dl bench {name} --device gpu: {reason}, so nothing was measured; run it "
                  "without --device gpu to measure the CPU.", file=sys.stderr)
            return None
    return get_device(kind)


def command_line(args: argparse.Namespace) -> str:
    """The command as typed, ``edu-dl`` and ``args.argv``; plain ``edu-dl`` without argv."""
    argv = getattr(args, "argv", None)
    return "edu-dl " + " ".join(argv) if argv else "edu-dl"


# --------------------------------------------------------------------------- output


def progress(total: int, desc: str, enabled: bool = True) -> Any:
    """A tqdm bar on stderr; off with --no-progress, TQDM_DISABLE=1 or when not a terminal."""
    from tqdm import tqdm

    from edu_dl.util.progress import progress_disabled

    return tqdm(total=total, desc=desc, unit="task", file=sys.stderr,
                disable=progress_disabled(enabled))


def each(items: Sequence[T], desc: str, enabled: bool = True,
         name: Callable[[T], str] = str) -> Iterator[T]:
    """The items one by one under a progress bar that names the current one."""
    with progress(len(items), desc, enabled) as bar:
        for item in items:
            bar.set_postfix_str(name(item))
            yield item
            bar.update()


# --------------------------------------------------------------------------- formats


def now() -> str:
    """The local date, time and time zone as the reports print them: ``2026-03-01 14:05 CET``."""
    return datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")


def format_time(seconds: float) -> str:
    """3 significant figures in a readable unit: 37.2 µs, 1.52 ms, 2.10 s."""
    for unit, scale in (("µs", 1e-6), ("ms", 1e-3)):
        if seconds < scale * 1000:
            value = seconds / scale
            return f"{value:.3g} {unit}" if value < 100 else f"{value:.0f} {unit}"
    return f"{seconds:.3g} s"


def format_ratio(ratio: float) -> str:
    """A ratio followed by the multiplication sign: two decimals below 10, one from 10 on."""
    return f"{ratio:.2f}{TIMES}" if ratio < 10 else f"{ratio:.1f}{TIMES}"


# --------------------------------------------------------------------------- timing


def load_average() -> float:
    """The 1-minute load average; NaN where the platform does not report one."""
    try:
        return os.getloadavg()[0]
    except (OSError, AttributeError):  # not on every platform
        return float("nan")


def busy_note(before: float, after: float) -> str | None:
    """A warning when the 1-minute load average exceeded the usable cores, else None."""
    cores = int(hw.usable_cores().value)  # affinity and cgroup quota
    if max(before, after) > cores:
        return (f"the machine was busy: 1-minute load average {before:.1f} before and "
                f"{after:.1f} after the run on {cores} cores, so absolute times are inflated and "
                "noisier; interleaving keeps the ratios fairer than the times")
    return None


# --------------------------------------------------------------------------- the machine


def package_version(*names: str) -> str:
    """'name version' of the first installed distribution (never imports it)."""
    for name in names:
        try:
            return f"{name} {metadata.version(name)}"
        except metadata.PackageNotFoundError:
            continue
    return f"{names[0]} (not installed)"


def cpu_name() -> str:
    """The CPU's model name where the machine reveals it, else ``platform.machine()``."""
    cpu = hw.read_cpu()
    return str(cpu.model.value) if cpu.model.known else platform.machine()


def machine_lines(device: Device | None = None) -> list[str]:
    """CPU, cores, library versions, BLAS (and the GPU in GPU mode), as Markdown list items."""
    versions = [package_version("numpy"), package_version("edu-dl"), package_version("torch"),
                package_version("tensorflow-cpu", "tensorflow")]
    lines = [
        f"- CPU: {cpu_name()}, {int(hw.usable_cores().value)} usable cores "
        f"({os.cpu_count()} online)",
        f"- OS: {platform.platform()}; Python {platform.python_version()}",
        "- " + ", ".join(versions),
        f"- BLAS (NumPy): {blas_description()}",
    ]
    if device is not None and device.kind == "gpu":
        gpu = gpu_name() if device.runs_on == "gpu" else device.label
        lines.append(f"- GPU: {gpu}; {package_version('cupy-cuda12x', 'cupy-cuda13x', 'cupy')}")
    return lines


def blas_description() -> str:
    """NumPy's BLAS: library, version, architecture, threads and threading layer from
    threadpoolctl (NumPy's own among the BLAS libraries loaded: SciPy brings another OpenBLAS);
    else name and version from NumPy's build configuration; else 'unknown'."""
    try:
        import numpy as np

        config: Any = np.show_config(mode="dicts")
        info = config["Build Dependencies"]["blas"]
        built = f"{info.get('name')} {info.get('version')}"
    except Exception:
        info, built = {}, "unknown"
    try:
        from threadpoolctl import threadpool_info

        blas = [i for i in threadpool_info() if i.get("user_api") == "blas"]
        numpys = [b for b in blas if b.get("version") == info.get("version")] or blas
        if numpys:
            b = numpys[0]
            return (f"{b.get('internal_api')} {b.get('version')} ({b.get('architecture')}, "
                    f"{b.get('num_threads')} threads, {b.get('threading_layer')})")
    except ImportError:
        pass
    return built


def limit_threads(threads: int | None) -> Any:
    """In this process, cap BLAS/OpenMP pools at ``threads`` (needs threadpoolctl)."""
    import contextlib

    if not threads:
        return contextlib.nullcontext()
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        return contextlib.nullcontext()
    return threadpool_limits(limits=threads)
