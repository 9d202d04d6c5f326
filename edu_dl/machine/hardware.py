"""What this machine is and what it can do at best: the facts behind ``edu-dl doctor``.

- CPU facts parsed from ``/proc/cpuinfo`` text (x86 ``flags``, ARM ``Features``) and sysfs;
- theoretical peak FLOP/s = cores * clock * FLOPs per cycle, where FLOPs per cycle per core =
  SIMD lanes * 2 (an FMA is a multiply and an add) * FMA units per core;
- theoretical memory bandwidth = transfers per second * bus width in bytes * channels;
- measured bandwidth (a NumPy copy) and matmul FLOP/s, checked against the theory.

Which GPUs CuPy, PyTorch and TensorFlow each see, each probed in its own process, is in
:mod:`edu_dl.machine.probes`.

A fact the machine does not reveal (FMA units per core, memory type and channels inside a VM) is
a :class:`Fact` with ``value=None`` and the reason, never a guess passed off as a measurement.
"""

from __future__ import annotations

import math
import os
import platform
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from edu_dl.gpu.timing import time_synchronized

X = "\u00d7"  # the multiplication sign in printed formulas, spelled out for linters

# --------------------------------------------------------------------------- facts


@dataclass(frozen=True)
class Fact:
    """A value and where it came from, or ``value=None`` and the reason it is unknown."""

    value: Any = None
    unit: str = ""
    source: str = ""
    reason: str = ""

    @property
    def known(self) -> bool:
        return self.value is not None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def text(self, fmt: str = "{}") -> str:
        """'3.2 GHz' when known, 'unknown: <reason>' when not."""
        if not self.known:
            return f"unknown: {self.reason}"
        return f"{fmt.format(self.value)} {self.unit}".strip()


def unknown(reason: str, unit: str = "") -> Fact:
    """A Fact without a value: ``reason`` says why it is unknown."""
    return Fact(None, unit, "", reason)


# --------------------------------------------------------------------------- formulas


def ddr_transfers(clock_mhz: float) -> float:
    """Mega-transfers per second of DDR memory: 2 * the I/O clock (data on both clock edges)."""
    return 2.0 * clock_mhz


def bandwidth_mb_s(mega_transfers: float, bus_bytes: int = 8, channels: int = 1) -> float:
    """Theoretical memory bandwidth in MB/s = transfers per second * bus bytes * channels.

    The source's DDR4-2933 example: (1466.67 MHz * 2) * 8 B * 4 channels = 93,866.88 MB/s.
    """
    if mega_transfers <= 0 or bus_bytes <= 0 or channels <= 0:
        raise ValueError(
            f"bandwidth_mb_s: transfers ({mega_transfers}), bus bytes ({bus_bytes}) and channels "
            f"({channels}) must all be positive"
        )
    return mega_transfers * bus_bytes * channels


def flops_per_cycle(simd_bits: int, fma: bool, fma_units: int, dtype_bits: int = 32) -> int:
    """FLOPs one core can finish per cycle = lanes * (2 with FMA, else 1) * vector FP units."""
    if simd_bits < dtype_bits or fma_units < 1:
        raise ValueError(
            f"flops_per_cycle: need simd_bits ≥ dtype_bits and fma_units ≥ 1, got "
            f"simd_bits={simd_bits}, dtype_bits={dtype_bits}, fma_units={fma_units}"
        )
    return (simd_bits // dtype_bits) * (2 if fma else 1) * fma_units


def peak_flops(cores: int, clock_hz: float, per_cycle: int) -> float:
    """Theoretical peak FLOP/s = cores * clock * FLOPs per cycle per core."""
    return cores * clock_hz * per_cycle


def matmul_flops(m: int, n: int | None = None, k: int | None = None) -> int:
    """FLOPs of an (m, k) @ (k, n) product: m·n outputs, each k multiplies and k adds = 2mnk.

    One argument is the square case: ``matmul_flops(n)`` = 2n³ (a missing size defaults to ``m``).
    """
    n = m if n is None else n
    k = m if k is None else k
    return 2 * m * n * k


def matmul_intensity(n: int, itemsize: int = 4) -> float:
    """FLOPs per byte of an n x n matmul: 2n³ / (3 n² * itemsize) (read A and B, write C)."""
    return matmul_flops(n) / (3 * n * n * itemsize)


# --------------------------------------------------------------------------- the CPU

# Instruction sets worth naming in the table, in the order people know them.
SIMD_FLAGS: tuple[str, ...] = (
    "sse", "sse2", "pni", "ssse3", "sse4_1", "sse4_2", "avx", "avx2", "fma", "fma4",
    "avx512f", "avx512bw", "avx512_vnni", "avx512_bf16", "avx512_fp16", "avx_vnni", "amx_tile",
    "neon", "vfpv4", "asimd", "asimdhp", "asimddp", "bf16", "i8mm", "sve", "sve2",
)

# ARM cores name themselves by (implementer, part) numbers, not by a model-name line.
ARM_PARTS: dict[tuple[str, str], str] = {
    ("0x41", "0xd03"): "ARM Cortex-A53",
    ("0x41", "0xd07"): "ARM Cortex-A57",
    ("0x41", "0xd08"): "ARM Cortex-A72",
    ("0x41", "0xd0b"): "ARM Cortex-A76",
    ("0x41", "0xd0c"): "ARM Neoverse-N1",
    ("0x41", "0xd40"): "ARM Neoverse-V1",
    ("0x41", "0xd49"): "ARM Neoverse-N2",
    ("0x41", "0xd4f"): "ARM Neoverse-V2",
}

NO_CLOCK_REASON = (
    "the kernel shows no clock: /proc/cpuinfo has no 'cpu MHz' line (ARM kernels never print one) "
    "and there is no /sys/devices/system/cpu/cpu0/cpufreq (usual inside VMs); give --clock-mhz"
)
FMA_UNITS_REASON = (
    "the CPU does not reveal how many vector FMA units each core has (cpuinfo lists instruction "
    "sets, not execution units); give --fma-units from the vendor's documentation"
)
ASSUMED_FMA_UNITS = 2  # most x86 desktop and server cores since Intel Haswell and AMD Zen 2


@dataclass(frozen=True)
class CpuFacts:
    """What /proc/cpuinfo, sysfs and the scheduler say about the CPU."""

    model: Fact
    architecture: str
    logical_cores: Fact
    physical_cores: Fact
    usable_cores: Fact
    flags: frozenset[str]
    simd_bits: Fact
    fma: bool
    clock_mhz: Fact

    @property
    def simd(self) -> list[str]:
        """The notable instruction-set flags present, in SIMD_FLAGS order."""
        return [f for f in SIMD_FLAGS if f in self.flags]

    def as_dict(self) -> dict[str, Any]:
        return {
            "model": self.model.as_dict(),
            "architecture": self.architecture,
            "logical_cores": self.logical_cores.as_dict(),
            "physical_cores": self.physical_cores.as_dict(),
            "usable_cores": self.usable_cores.as_dict(),
            "simd": self.simd,
            "simd_bits": self.simd_bits.as_dict(),
            "fma": self.fma,
            "clock_mhz": self.clock_mhz.as_dict(),
        }


def machine_label(cpu: CpuFacts) -> str:
    """One line naming the machine that absolute numbers come from."""
    model = cpu.model.value if cpu.model.known else "unknown CPU"
    architecture = cpu.architecture or platform.machine()
    return f"{model}, {cpu.usable_cores.value} usable cores, {platform.system()} {architecture}"


def parse_cpuinfo(text: str) -> tuple[list[dict[str, str]], dict[str, str]]:
    """(one dict per 'processor' block, the machine-wide lines such as ARM's 'Hardware')."""
    processors: list[dict[str, str]] = []
    machine: dict[str, str] = {}
    for block in re.split(r"\n\s*\n", text.strip()):
        fields: dict[str, str] = {}
        for line in block.splitlines():
            key, sep, value = line.partition(":")
            if sep:
                fields[key.strip()] = value.strip()
        if "processor" in fields and fields["processor"].isdigit():
            processors.append(fields)
        else:
            machine.update(fields)
    return processors, machine


def _simd_width(flags: frozenset[str], sve_bytes: int | None) -> Fact:
    """The widest float vector register the flags promise, in bits."""
    source = "/proc/cpuinfo flags"
    if "avx512f" in flags:
        return Fact(512, "bit", f"{source}: avx512f")
    if "avx" in flags:
        return Fact(256, "bit", f"{source}: avx")
    if "sse" in flags:
        return Fact(128, "bit", f"{source}: sse")
    if "sve" in flags and sve_bytes:
        return Fact(8 * sve_bytes, "bit", "/proc/sys/abi/sve_default_vector_length")
    if "asimd" in flags or "neon" in flags:
        note = " (SVE present, its vector length unknown)" if "sve" in flags else ""
        return Fact(128, "bit", f"/proc/cpuinfo Features: NEON/asimd{note}")
    return unknown("no SIMD instruction set among the CPU flags", "bit")


def _has_fma(flags: frozenset[str]) -> bool:
    # AArch64 SIMD always has fused multiply-add; 32-bit ARM has it from VFPv4.
    return bool(flags & {"fma", "fma4", "asimd"}) or {"neon", "vfpv4"} <= flags


def _clock(
    processors: list[dict[str, str]], model: str, cpufreq_max_khz: int | None
) -> Fact:
    """The best clock figure available, best source first."""
    if cpufreq_max_khz:
        return Fact(cpufreq_max_khz / 1000, "MHz", "maximum (turbo) clock: sysfs cpuinfo_max_freq")
    nominal = re.search(r"@\s*([\d.]+)\s*GHz", model)
    if nominal:
        return Fact(
            float(nominal.group(1)) * 1000,
            "MHz",
            "nominal clock in the model name (turbo may be higher)",
        )
    mhz = [float(p["cpu MHz"]) for p in processors if _is_number(p.get("cpu MHz", ""))]
    if mhz and max(mhz) > 0:
        return Fact(
            max(mhz),
            "MHz",
            "'cpu MHz' in /proc/cpuinfo (in a VM: the host's nominal clock; turbo may be higher)",
        )
    return unknown(NO_CLOCK_REASON, "MHz")


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def cpu_from_cpuinfo(
    text: str,
    *,
    architecture: str = "",
    usable: Fact | None = None,
    cpufreq_max_khz: int | None = None,
    sve_bytes: int | None = None,
) -> CpuFacts:
    """CPU facts from the text of /proc/cpuinfo plus what sysfs and the scheduler add."""
    processors, machine = parse_cpuinfo(text)
    if not processors:
        raise ValueError("cpu_from_cpuinfo: no 'processor' blocks in the /proc/cpuinfo text")
    first = processors[0]
    flags = frozenset((first.get("flags") or first.get("Features") or "").split())
    is_arm = "CPU implementer" in first
    arch = architecture or ("arm" if is_arm else "x86_64")

    name = first.get("model name") or machine.get("model name", "")
    if is_arm:
        part = ARM_PARTS.get((first.get("CPU implementer", ""), first.get("CPU part", "")))
        # ARMv7 kernels print a vague 'ARMv7 Processor rev 3'; the part number is precise.
        name = part or name
        if "Model" in machine:
            name = f"{name} ({machine['Model']})" if name else machine["Model"]
    model = (
        Fact(name, "", "/proc/cpuinfo")
        if name
        else unknown("/proc/cpuinfo names no model (and the CPU part number is not in the table)")
    )

    logical = Fact(len(processors), "", "/proc/cpuinfo processor blocks")
    cores = {(p.get("physical id", "0"), p["core id"]) for p in processors if "core id" in p}
    if cores:
        physical = Fact(len(cores), "", "/proc/cpuinfo distinct (physical id, core id)")
    else:
        physical = Fact(
            len(processors), "", "assumed = logical: /proc/cpuinfo lists no core ids (no SMT)"
        )
    return CpuFacts(
        model=model,
        architecture=arch,
        logical_cores=logical,
        physical_cores=physical,
        usable_cores=usable or logical,
        flags=flags,
        simd_bits=_simd_width(flags, sve_bytes),
        fma=_has_fma(flags),
        clock_mhz=_clock(processors, name, cpufreq_max_khz),
    )


def cgroup_cpu_limit(text: str) -> float | None:
    """CPUs a cgroup v2 'cpu.max' line allows ('quota period'); None for 'max' (no limit)."""
    parts = text.split()
    if len(parts) != 2 or parts[0] == "max":
        return None
    return int(parts[0]) / int(parts[1])


def usable_cores() -> Fact:
    """CPUs this process may run on: the affinity mask, capped by a container's CPU quota."""
    try:
        count = len(os.sched_getaffinity(0))
        source = "os.sched_getaffinity"
    except AttributeError:  # not on macOS or Windows
        count, source = os.cpu_count() or 1, "os.cpu_count"
    try:
        quota = cgroup_cpu_limit(Path("/sys/fs/cgroup/cpu.max").read_text())
    except (OSError, ValueError):
        quota = None
    if quota is not None and math.ceil(quota) < count:
        return Fact(math.ceil(quota), "", f"cgroup cpu.max quota ({quota:g} CPUs)")
    return Fact(count, "", source)


def _read_int(path: Path) -> int | None:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def read_cpu(
    proc: Path = Path("/proc"), sys_cpu: Path = Path("/sys/devices/system/cpu")
) -> CpuFacts:
    """This machine's CPU facts (Linux files; elsewhere what Python's platform module knows)."""
    try:
        text = (proc / "cpuinfo").read_text()
    except OSError:
        text = ""
    if "processor" not in text:
        count = os.cpu_count() or 1
        why = f"no {proc / 'cpuinfo'} (not Linux)"
        return CpuFacts(
            model=Fact(platform.processor(), "", "platform.processor()")
            if platform.processor()
            else unknown(why),
            architecture=platform.machine(),
            logical_cores=Fact(count, "", "os.cpu_count"),
            physical_cores=unknown(why),
            usable_cores=usable_cores(),
            flags=frozenset(),
            simd_bits=unknown(why, "bit"),
            fma=False,
            clock_mhz=unknown(why, "MHz"),
        )
    return cpu_from_cpuinfo(
        text,
        architecture=platform.machine(),
        usable=usable_cores(),
        cpufreq_max_khz=_read_int(sys_cpu / "cpu0" / "cpufreq" / "cpuinfo_max_freq"),
        sve_bytes=_read_int(proc / "sys" / "abi" / "sve_default_vector_length"),
    )


def peak_cores(cpu: CpuFacts) -> int | None:
    """Cores whose FMA units we may use: usable CPUs, but no more than physical cores."""
    if not (cpu.usable_cores.known and cpu.physical_cores.known):
        return None
    return int(min(cpu.usable_cores.value, cpu.physical_cores.value))


def theoretical_peak(
    cpu: CpuFacts,
    fma_units: int | None,
    clock_mhz: float | None = None,
    max_cores: int | None = None,
) -> tuple[Fact, Fact]:
    """(theoretical float32 peak, labelled assumption) in GFLOP/s for the usable cores.

    The theoretical figure needs ``fma_units`` (the machine does not reveal it); the assumption
    uses ASSUMED_FMA_UNITS and says so. ``max_cores`` caps the cores (a thread limit).
    """
    clock = Fact(clock_mhz, "MHz", "--clock-mhz") if clock_mhz else cpu.clock_mhz
    cores = peak_cores(cpu)
    if cores is not None and max_cores:
        cores = min(cores, max_cores)
    missing = [
        reason
        for ok, reason in (
            (clock.known, f"clock {clock.reason}"),
            (cpu.simd_bits.known, f"SIMD width {cpu.simd_bits.reason}"),
            (cores is not None, "core count unknown"),
        )
        if not ok
    ]
    if missing:
        both = unknown("; ".join(missing), "GFLOP/s")
        return both, both
    assert cores is not None

    def peak(units: int) -> float:
        per_cycle = flops_per_cycle(int(cpu.simd_bits.value), cpu.fma, units)
        return peak_flops(cores, float(clock.value) * 1e6, per_cycle) / 1e9

    lanes = int(cpu.simd_bits.value) // 32
    formula = (
        f"{cores} cores {X} {float(clock.value):.0f} MHz {X} {lanes} float32 lanes {X} "
        f"{2 if cpu.fma else 1} (FMA) {X} {{units}}"
    )
    assumed = Fact(
        peak(ASSUMED_FMA_UNITS),
        "GFLOP/s",
        f"ASSUMPTION: {formula.format(units=f'{ASSUMED_FMA_UNITS} FMA units')}; "
        f"clock: {clock.source}",
    )
    if fma_units is None:
        return unknown(FMA_UNITS_REASON, "GFLOP/s"), assumed
    theory = Fact(
        peak(fma_units),
        "GFLOP/s",
        formula.format(units=f"{fma_units} FMA units (--fma-units)") + f"; clock: {clock.source}",
    )
    return theory, assumed


# --------------------------------------------------------------------------- memory

NO_MEMORY_SPEED_REASON = (
    "memory type, speed and channel count live in the SMBIOS tables (`sudo dmidecode -t memory`), "
    "which VMs and unprivileged users do not see; give --memory-mts and --channels"
)


def parse_meminfo(text: str) -> dict[str, int]:
    """/proc/meminfo as bytes per field ('MemTotal: 16318480 kB' → 16710123520)."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        match = re.match(r"(\w+):\s+(\d+)\s*(kB)?", line)
        if match:
            out[match.group(1)] = int(match.group(2)) * (1024 if match.group(3) else 1)
    return out


def read_ram(proc: Path = Path("/proc")) -> Fact:
    """Total RAM in bytes."""
    try:
        info = parse_meminfo((proc / "meminfo").read_text())
        return Fact(info["MemTotal"], "B", "/proc/meminfo MemTotal")
    except (OSError, KeyError):
        pass
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        return Fact(total, "B", "os.sysconf")
    except (ValueError, OSError, AttributeError):
        return unknown("neither /proc/meminfo nor sysconf report the RAM size", "B")


def theoretical_bandwidth(
    memory_mts: float | None, channels: int | None, bus_bytes: int = 8
) -> Fact:
    """Theoretical bandwidth in GB/s from --memory-mts and --channels, or unknown with why."""
    if memory_mts is None or channels is None:
        flags = (("--memory-mts", memory_mts), ("--channels", channels))
        missing = " and ".join(name for name, v in flags if v is None)
        return unknown(f"{NO_MEMORY_SPEED_REASON} (missing {missing})", "GB/s")
    mb_s = bandwidth_mb_s(memory_mts, bus_bytes, channels)
    return Fact(
        mb_s / 1000,
        "GB/s",
        f"{memory_mts:g} MT/s {X} {bus_bytes} B {X} {channels} channels = {mb_s:,.2f} MB/s (flags)",
    )


# --------------------------------------------------------------------------- measurements


def _no_sync() -> None:
    """NumPy's work is done when the call returns: nothing to wait for."""


def measure_bandwidth(nbytes: int = 256 * 2**20, repeats: int = 5) -> Fact:
    """Best copy bandwidth in GB/s of one NumPy copy: 2 * nbytes moved (read + write) / time."""
    src = np.ones(nbytes // 8, dtype=np.float64)  # ones, not empty: pages must really exist
    dst = np.zeros_like(src)
    # One warm-up copy first: it also faults the pages in.
    best = min(time_synchronized(lambda: np.copyto(dst, src), _no_sync, 1, repeats))
    return Fact(
        2 * src.nbytes / best / 1e9,
        "GB/s",
        f"NumPy copy of {src.nbytes / 2**20:.0f} MiB, best of {repeats} (one thread)",
    )


def measure_matmul(n: int = 1024, repeats: int = 5) -> Fact:
    """Best float32 NumPy matmul GFLOP/s at size n: 2n³ / time."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    # One warm-up call first: the BLAS thread pool starts, pages fault in.
    best = min(time_synchronized(lambda: a @ b, _no_sync, 1, repeats))
    return Fact(
        matmul_flops(n) / best / 1e9,
        "GFLOP/s",
        f"NumPy float32 {n}x{n} matmul, best of {repeats}",
    )


def check_measured(theory: Fact, measured: Fact, what: str, inputs: str) -> tuple[Fact, str]:
    """(the theory, a verdict). Measured above theory means an input of the theory is wrong:
    the theory is then returned as unknown, with the numbers and which inputs to doubt."""
    if not (theory.known and measured.known):
        return theory, f"{what}: not checked (theory or measurement unknown)"
    if float(measured.value) <= float(theory.value):
        frac = float(measured.value) / float(theory.value)
        return theory, f"{what}: measured is {frac:.0%} of theoretical (ok)"
    reason = (
        f"the computed {float(theory.value):.1f} {theory.unit} is below the measured "
        f"{float(measured.value):.1f} {measured.unit}, so an input is wrong ({inputs})"
    )
    return unknown(reason, theory.unit), f"{what}: CONTRADICTED: {reason}"
