"""Exercise 1, getting started: peak FLOP/s, choosing a GPU, a device string, a machine's peak from
the facts /proc/cpuinfo lists (sockets, cores, hyperthreads, vector flags).

The oracles are the doctor's own code (``edu_dl.machine.hardware``), PyTorch's ``torch.device``
and a plain stable sort, never the formula as the exercise states it. The private half:
oracles, hidden cases and mistake replays; the source checks that keep a student from calling
``edu_dl.machine.hardware`` are public (``edu_dl.harness.ex01``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from edu_dl.grading.authoring.hints import (
    DtypeKind,
    Equals,
    Mistake,
    Permuted,
    Scaled,
    StartsWith,
)
from edu_dl.grading.authoring.spec import Part, tolerance
from edu_dl.harness.ex01 import MACHINE_SOURCE, PEAK_SOURCE

Array = np.ndarray
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
    from edu_dl.machine.hardware import flops_per_cycle, peak_flops

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


# --------------------------------------------------------------------------- a machine's peak

FLAGS = {
    "sse only": "fpu tsc sse sse2",
    "avx2 + fma": "fpu tsc sse sse2 ssse3 sse4_1 sse4_2 avx avx2 fma",
    "avx, no fma": "fpu tsc sse sse2 ssse3 sse4_1 sse4_2 avx",
    "avx-512 + fma": "fpu tsc sse sse2 sse4_2 avx avx2 fma avx512f avx512dq avx512bw avx512vl",
}


def logical_cpus(sockets: int, cores: int, threads: int) -> tuple[Array, Array]:
    """(physical id, core id) of every logical CPU, in /proc/cpuinfo's order: hyperthreads of a
    core repeat its pair; core ids restart at 0 on each socket."""
    pairs = [(socket, core) for _thread in range(threads) for socket in range(sockets)
             for core in range(cores)]
    return (np.array([p for p, _ in pairs], dtype=np.int64),
            np.array([c for _, c in pairs], dtype=np.int64))


def _machine(sockets: int, cores: int, threads: int, flags: str, clock_mhz: float,
             fma_units: int) -> Case:
    return (*logical_cpus(sockets, cores, threads), flags, clock_mhz, fma_units)


def _machine_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    if not hidden:
        return [
            _machine(1, 2, 2, FLAGS["avx2 + fma"], 3000.0, 2),  # the lecture's CPU, with SMT
            _machine(2, 4, 2, FLAGS["avx2 + fma"], 2100.0, 2),  # two sockets
            _machine(1, 6, 2, FLAGS["avx-512 + fma"], 2000.0, 2),
            _machine(1, 4, 1, FLAGS["avx, no fma"], 2400.0, 1),
        ]
    cases = [_machine(int(rng.integers(1, 3)), int(rng.integers(1, 9)), int(rng.integers(1, 3)),
                      FLAGS[str(rng.choice(list(FLAGS)))],
                      float(rng.choice([1800.0, 2100.0, 2600.0, 3500.0])),
                      int(rng.integers(1, 3))) for _ in range(4)]
    cases.append(_machine(2, int(rng.integers(2, 9)), 2, FLAGS["avx2 + fma"], 2000.0, 2))
    return cases


def _widest_bits(words: set[str]) -> int:
    return 512 if "avx512f" in words else 256 if "avx" in words else 128 if "sse" in words else 32


def _machine_peak(physical_id: Array, core_id: Array, flags: str, clock_mhz: float,
                  fma_units: int, *, cores: int | None = None, bits: int | None = None,
                  fma: bool | None = None) -> float:
    """The doctor's theoretical peak (edu_dl.machine.hardware), GFLOP/s; keywords replay errors."""
    from edu_dl.machine.hardware import flops_per_cycle, peak_flops

    words = set(str(flags).split())
    physical = len(set(zip(np.asarray(physical_id).tolist(), np.asarray(core_id).tolist())))
    per_cycle = flops_per_cycle(simd_bits=bits or _widest_bits(words),
                                fma=("fma" in words) if fma is None else fma,
                                fma_units=int(fma_units))
    return peak_flops(cores=cores or physical, clock_hz=float(clock_mhz) * 1e6,
                      per_cycle=per_cycle) / 1e9


def _machine_mistake(message: str, variant: Callable[[Case], dict[str, Any]]) -> Mistake:
    """The peak with one fact taken the wrong way, where that differs from the right one."""
    def replay(e: Any, a: Case) -> float | None:
        wrong = _machine_peak(*a, **variant(a))
        return None if abs(wrong - float(e)) <= 1e-9 * abs(float(e)) else wrong

    return Mistake(replay, message, rtol=RATIO, atol=0.0)


MACHINE_HINTS = (
    _machine_mistake("your core count includes the hyperthreads: two logical CPUs of one core "
                     "share its vector units, so count distinct (physical id, core id) pairs",
                     lambda a: {"cores": len(a[0])}),
    _machine_mistake("your core count misses a socket: core ids start again at 0 on every "
                     "socket, so a core is a (physical id, core id) pair",
                     lambda a: {"cores": len(set(np.asarray(a[1]).tolist()))}),
    _machine_mistake("the WIDEST vector instructions count: with avx512f the registers hold "
                     "512 bits", lambda a: {"bits": 256}),
    _machine_mistake("without the fma flag a multiply and an add are two instructions: a lane "
                     "finishes one FLOP per instruction, not two", lambda a: {"fma": True}),
)


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
        id="ex01.machine_peak", points=2, cases=_machine_cases, expected=_machine_peak,
        compare=EXACT, arg_names=("physical_id", "core_id", "flags", "clock_mhz", "fma_units"),
        source_check=MACHINE_SOURCE, hints=MACHINE_HINTS,
    ),
]
