"""Exercise 1, getting started: peak FLOP/s, choosing a GPU, a device string, reading /proc/cpuinfo.

The oracles are the doctor's own code (``edu_dl.hardware``), PyTorch's ``torch.device`` and a plain
stable sort, never the formula as the exercise states it. The private half: oracles, hidden cases
and mistake replays; the source checks that keep a student from calling ``edu_dl.hardware`` are
public (``edu_dl.harness.ex01``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from edu_dl.grading.hints import (
    DtypeKind,
    Equals,
    Mistake,
    OneOf,
    OutputIs,
    Permuted,
    Scaled,
    StartsWith,
    Stripped,
)
from edu_dl.grading.spec import Part, tolerance
from edu_dl.harness.ex01 import CPUINFO_SOURCE, PEAK_SOURCE

Case = tuple[Any, ...]
EXACT = tolerance(rtol=1e-9, atol=0.0)
RATIO = 1e-9  # a hint's factor, to 1e-9 relative


def _ratio(factor: float, message: str) -> Scaled:
    """got == factor * expected, to 1e-9 relative."""
    return Scaled(message, factor=factor, rtol=RATIO)


# --------------------------------------------------------------------------- peak FLOP/s


def _peak_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    # (cores, clock_mhz, simd_bits, fma_units): the lecture's example CPU, a 16-core AVX-512 part
    cases: list[Case] = [(2, 3000.0, 256, 2), (16, 2100.0, 512, 1), (4, 2400.0, 128, 2)]
    if hidden:
        cases = [(int(rng.integers(1, 129)), float(rng.integers(1000, 5001)),
                  int(rng.choice([128, 256, 512])), int(rng.integers(1, 3))) for _ in range(4)]
    return cases


def _peak_expected(cores: int, clock_mhz: float, simd_bits: int, fma_units: int) -> float:
    from edu_dl.hardware import flops_per_cycle, peak_flops

    per_cycle = flops_per_cycle(simd_bits=simd_bits, fma=True, fma_units=fma_units)
    return peak_flops(cores=cores, clock_hz=clock_mhz * 1e6, per_cycle=per_cycle) / 1e9


# --------------------------------------------------------------------------- choosing a GPU

# The source's criteria: at least 1000 CUDA cores and 8 GB, NVIDIA (CUDA/cuDNN); then bandwidth.
MIN_CORES, MIN_MEMORY_GB = 1000, 8.0
VISIBLE_TABLE = (  # vendor, CUDA cores (or stream processors), memory GB, bandwidth GB/s
    ("NVIDIA", 5120, 16.0, 900.0),  # Tesla V100 PCIe 16 GB
    ("NVIDIA", 2944, 8.0, 448.0),  # RTX 2080
    ("NVIDIA", 640, 2.0, 80.0),  # GT 1030-class card: too few cores, too little memory
    ("AMD", 3840, 16.0, 1024.0),  # Radeon VII: fast, but no CUDA
    ("NVIDIA", 10496, 24.0, 936.0),  # RTX 3090
    ("NVIDIA", 1000, 6.0, 336.0),  # exactly 1000 cores, but 6 GB
)


def _table(rows: Any) -> Case:
    vendors, cores, memory, bandwidth = zip(*rows) if rows else ((), (), (), ())
    return (np.array(vendors, dtype=str).reshape(-1), np.array(cores, dtype=np.int64),
            np.array(memory, dtype=np.float64), np.array(bandwidth, dtype=np.float64))


def _gpu_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    if not hidden:
        edge = [("NVIDIA", 1000, 8.0, 300.0), ("NVIDIA", 999, 8.0, 900.0),
                ("NVIDIA", 4000, 7.9, 800.0)]
        return [_table(VISIBLE_TABLE), _table(edge)]
    cases = []
    for size in (int(rng.integers(5, 12)), int(rng.integers(5, 12)), 3):
        rows = []
        for _ in range(size):
            vendor = str(rng.choice(["NVIDIA", "NVIDIA", "NVIDIA", "AMD", "Intel"]))
            cores = int(rng.choice([640, 999, 1000, 2304, 4352, 8704, 16384]))
            memory = float(rng.choice([4.0, 6.0, 7.9, 8.0, 11.0, 16.0, 24.0]))
            bandwidth = float(rng.choice([192.0, 448.0, 616.0, 760.0, 936.0, 1008.0]))
            rows.append((vendor, cores, memory, bandwidth))
        cases.append(_table(rows))
    cases[-1] = _table([("AMD", 4096, 16.0, 1024.0), ("NVIDIA", 384, 2.0, 64.0),
                        ("Intel", 4096, 16.0, 560.0)])  # no card qualifies
    return cases


def _gpu_expected(vendors: Any, cores: Any, memory_gb: Any, bandwidth: Any) -> Any:
    rows = [i for i in range(len(cores))
            if vendors[i] == "NVIDIA" and cores[i] >= MIN_CORES and memory_gb[i] >= MIN_MEMORY_GB]
    rows.sort(key=lambda i: -float(bandwidth[i]))  # sort is stable: ties keep the table's order
    return np.array(rows, dtype=np.int64)


def _gpu_variant(a: Case, *, strict: bool = False, vendor: bool = True,
                 ascending: bool = False) -> Any:
    vendors, cores, memory_gb, bandwidth = a
    ok = (cores > MIN_CORES) & (memory_gb > MIN_MEMORY_GB) if strict else (
        (cores >= MIN_CORES) & (memory_gb >= MIN_MEMORY_GB))
    if vendor:
        ok &= vendors == "NVIDIA"
    rows = np.flatnonzero(ok)
    order = np.argsort(bandwidth[rows] if ascending else -bandwidth[rows], kind="stable")
    return rows[order]


def _gpu_mistake(message: str, **variant: bool) -> Mistake:
    """The rows _gpu_variant(**variant) picks, exactly."""
    return Mistake(lambda e, a: _gpu_variant(a, **variant), message, rtol=0.0, atol=0.0)


# --------------------------------------------------------------------------- device string


def _device_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    # (cuda_available, device_count, index)
    cases: list[Case] = [(False, 0, 0), (True, 1, 0), (True, 4, 2), (True, 2, 2), (True, 2, -1)]
    if hidden:
        cases = [(False, 0, int(rng.integers(0, 3)))]
        for _ in range(4):
            count = int(rng.integers(1, 9))
            cases.append((True, count, int(rng.integers(-2, count + 2))))
        cases.append((True, 3, 3))  # one past the last GPU
    return cases


def _device_expected(cuda_available: bool, device_count: int, index: int) -> str:
    import torch

    if cuda_available and 0 <= index < device_count:
        return str(torch.device("cuda", index))
    return str(torch.device("cpu"))


# --------------------------------------------------------------------------- /proc/cpuinfo

CPUINFO_FLAGS = {
    "sse only": "fpu tsc sse sse2",
    "avx2 + fma": "fpu tsc sse sse2 ssse3 sse4_1 sse4_2 avx avx2 fma",
    "avx, no fma": "fpu tsc sse sse2 ssse3 sse4_1 sse4_2 avx",
    "avx-512 + fma": "fpu tsc sse sse2 sse4_2 avx avx2 fma avx512f avx512dq avx512bw avx512vl",
}


def cpuinfo_text(model: str, sockets: int, cores: int, threads: int, flags: str) -> str:
    """A /proc/cpuinfo excerpt: ``sockets`` x ``cores`` x ``threads`` processor blocks.

    Hyperthreads share a (physical id, core id); core ids restart at 0 on each socket, as on Linux.
    """
    blocks, processor = [], 0
    for _thread in range(threads):
        for socket in range(sockets):
            for core in range(cores):
                blocks.append(
                    f"processor\t: {processor}\nvendor_id\t: GenuineIntel\n"
                    f"model name\t: {model}\nphysical id\t: {socket}\n"
                    f"siblings\t: {cores * threads}\ncore id\t\t: {core}\n"
                    f"cpu cores\t: {cores}\nflags\t\t: {flags}\n")
                processor += 1
    return "\n".join(blocks)


def _cpuinfo_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    if not hidden:
        return [
            (cpuinfo_text("Example CPU @ 3.00GHz", 1, 2, 1, CPUINFO_FLAGS["avx2 + fma"]),),
            (cpuinfo_text("Intel(R) Core(TM) i7-8700 CPU @ 3.20GHz", 1, 6, 2,
                          CPUINFO_FLAGS["avx2 + fma"]),),
            (cpuinfo_text("Intel(R) Xeon(R) Gold 6130 CPU @ 2.10GHz", 2, 4, 2,
                          CPUINFO_FLAGS["avx-512 + fma"]),),
        ]
    models = ["Intel(R) Xeon(R) CPU E5-2670 0 @ 2.60GHz", "AMD EPYC 7B12",
              "Intel(R) Pentium(R) CPU G4560 @ 3.50GHz",
              "Intel(R) Celeron(R) CPU  J1900  @ 1.99GHz"]
    cases: list[Case] = []
    for _ in range(4):
        flags = CPUINFO_FLAGS[str(rng.choice(list(CPUINFO_FLAGS)))]
        cases.append((cpuinfo_text(str(rng.choice(models)), int(rng.integers(1, 3)),
                                   int(rng.integers(1, 7)), int(rng.integers(1, 3)), flags),))
    cases.append((cpuinfo_text("Intel(R) Core(TM) i5 CPU @ 2.40GHz", 1, 4, 1,
                               CPUINFO_FLAGS["avx, no fma"]),))
    return cases


def _cpuinfo_expected(text: str) -> tuple[str, int, int, int, bool]:
    from edu_dl.hardware import cpu_from_cpuinfo

    cpu = cpu_from_cpuinfo(text, architecture="x86_64")
    return (str(cpu.model.value), int(cpu.logical_cores.value), int(cpu.physical_cores.value),
            int(cpu.simd_bits.value), bool(cpu.fma))


def _core_ids(text: str) -> int:
    """The distinct core ids of the text, sockets mixed up (core ids restart on each socket)."""
    return len({line.split(":")[1].strip() for line in text.splitlines()
                if line.startswith("core id")})


def _cores_by_core_id(e: Any, a: Case) -> int | None:
    """The mistake: physical cores counted by core id alone (None where that is not fewer)."""
    count = _core_ids(a[0])
    return count if count < int(e[2]) else None


UNITS = "units: clock_mhz MHz = clock_mhz x 1e6 cycles/s, and GFLOP/s = FLOP/s / 1e9"
LANES = "simd_bits is the register width in bits: float32 lanes = simd_bits / 32"
GPU_NAMES = ("PyTorch names NVIDIA GPUs 'cuda' ('cuda:0', 'cuda:1', ...); 'gpu' is edu_dl's name "
             "and '/gpu:0' TensorFlow's")


PARTS = [
    Part(
        id="ex01.peak_gflops", points=1, cases=_peak_cases, expected=_peak_expected,
        compare=EXACT, arg_names=("cores", "clock_mhz", "simd_bits", "fma_units"),
        source_check=PEAK_SOURCE,
        hints=(
            Mistake(lambda e, a: 1 / a[3] * float(e) if a[3] != 2 else None,
                    "multiply by fma_units: each FMA unit finishes one vector FMA per cycle",
                    rtol=RATIO, atol=0.0),
            _ratio(0.5, "half the expected peak: an FMA (a multiply and an add) counts as 2 "
                        "FLOPs; check also the factor fma_units and the float32 lanes "
                        "(simd_bits / 32)"),
            _ratio(32.0, LANES),
            _ratio(64.0, LANES),
            *(_ratio(factor, UNITS) for factor in (1000.0, 1e-3, 1e9, 1e6, 1e-6)),
        ),
    ),
    Part(
        id="ex01.choose_gpus", points=2, cases=_gpu_cases, expected=_gpu_expected,
        arg_names=("vendors", "cuda_cores", "memory_gb", "bandwidth_gb_s"),
        hints=(
            DtypeKind("return the row indices of the qualifying cards (np.flatnonzero of the "
                      "mask), best first, not the mask itself", kind="b"),
            _gpu_mistake("'at least 1000 cores' and 'at least 8 GB' include the boundary: use "
                         ">=, not >", strict=True),
            _gpu_mistake("rank by bandwidth from the highest down (the best card first)",
                         ascending=True),
            _gpu_mistake("only NVIDIA cards have CUDA and cuDNN: keep vendors == 'NVIDIA'",
                         vendor=False),
            Permuted("the right cards in the wrong order: sort by bandwidth, highest first; "
                     "equal bandwidths keep the table's order (a stable sort)"),
        ),
    ),
    Part(
        id="ex01.pick_device", points=1, cases=_device_cases, expected=_device_expected,
        arg_names=("cuda_available", "device_count", "index"),
        hints=(
            Equals(GPU_NAMES, value="gpu"),
            StartsWith(GPU_NAMES, prefixes=("gpu:", "/gpu")),
            Equals("name the GPU by its index: 'cuda:0', 'cuda:1', ...", value="cuda"),
            StartsWith("check the index: GPUs are numbered 0 .. device_count - 1; any other "
                       "index (negative, or device_count and above) falls back to 'cpu'",
                       prefixes=("cuda:",), when=lambda e, a: e == "cpu"),
        ),
    ),
    Part(
        id="ex01.read_cpuinfo", points=2, cases=_cpuinfo_cases, expected=_cpuinfo_expected,
        arg_names=("text",),
        output_names=("model_name", "logical_cpus", "physical_cores", "simd_bits", "fma"),
        source_check=CPUINFO_SOURCE,
        hints=(
            Stripped("strip the spaces and tabs around the model name", output=0),
            OutputIs("physical cores: hyperthreads (SMT) repeat a core, so count the DISTINCT "
                     "(physical id, core id) pairs, not the processor blocks", output=2, other=1),
            Mistake(_cores_by_core_id, "core ids start again at 0 on every socket: a core is a "
                                       "(physical id, core id) pair", output=2, rtol=0.0,
                    atol=0.0),
            Equals("the WIDEST vector instructions count: check avx512f before avx/avx2",
                   output=3, value=256, when=lambda e, a: e[3] == 512),
            OneOf("simd_bits is the register width in bits (512, 256, 128), not the float32 "
                  "lanes", output=3, values=(8, 16, 4)),
        ),
    ),
]
