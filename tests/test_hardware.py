"""Machine facts from sample /proc text, the peak and bandwidth formulas, and robust probes."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest
from edu_dl.machine import hardware as hw
from edu_dl.machine import probes as gp

# Two cores with two hyper-threads each; the clock sits in power-saving mode (1000 MHz).
INTEL_BARE_METAL = "\n\n".join(
    f"""processor\t: {i}
vendor_id\t: GenuineIntel
model name\t: Intel(R) Xeon(R) Gold 6148 CPU @ 2.40GHz
cpu MHz\t\t: 1000.123
physical id\t: 0
siblings\t: 4
core id\t\t: {i % 2}
cpu cores\t: 2
flags\t\t: fpu sse sse2 ssse3 sse4_1 sse4_2 avx avx2 fma avx512f avx512bw hypervisor"""
    for i in range(4)
)

# A VM whose kernel prints no 'cpu MHz' and no core ids (seen under some hypervisors).
X86_VM_NO_MHZ = "\n\n".join(
    f"""processor\t: {i}
vendor_id\t: AuthenticAMD
model name\t: AMD EPYC Processor
flags\t\t: fpu sse sse2 ssse3 sse4_1 sse4_2 avx avx2 fma hypervisor"""
    for i in range(8)
)

# AWS Graviton2: AArch64 kernels print neither a model name nor a clock.
ARM_GRAVITON2 = "\n\n".join(
    f"""processor\t: {i}
BogoMIPS\t: 243.75
Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm
CPU implementer\t: 0x41
CPU architecture: 8
CPU variant\t: 0x3
CPU part\t: 0xd0c
CPU revision\t: 1"""
    for i in range(4)
)

RASPBERRY_PI_4 = (
    "\n\n".join(
        f"""processor\t: {i}
model name\t: ARMv7 Processor rev 3 (v7l)
BogoMIPS\t: 108.00
Features\t: half thumb fastmult vfp edsp neon vfpv3 tls vfpv4 idiva idivt vfpd32 lpae
CPU implementer\t: 0x41
CPU architecture: 7
CPU variant\t: 0x0
CPU part\t: 0xd08
CPU revision\t: 3"""
        for i in range(4)
    )
    + "\n\nHardware\t: BCM2711\nRevision\t: c03111\nModel\t\t: Raspberry Pi 4 Model B Rev 1.1\n"
)

MEMINFO = """MemTotal:       16318480 kB
MemFree:         8000000 kB
MemAvailable:   12000000 kB
HugePages_Total:       0
"""


# --------------------------------------------------------------------------- parsing


def test_intel_bare_metal_cores_simd_and_nominal_clock() -> None:
    cpu = hw.cpu_from_cpuinfo(INTEL_BARE_METAL)
    assert cpu.model.value == "Intel(R) Xeon(R) Gold 6148 CPU @ 2.40GHz"
    assert (cpu.logical_cores.value, cpu.physical_cores.value) == (4, 2)
    assert cpu.simd_bits.value == 512 and cpu.fma
    assert cpu.simd == ["sse", "sse2", "ssse3", "sse4_1", "sse4_2", "avx", "avx2", "fma",
                        "avx512f", "avx512bw"]
    # The model name's nominal clock beats the power-saving 'cpu MHz' reading.
    assert cpu.clock_mhz.value == pytest.approx(2400.0)
    assert "nominal" in cpu.clock_mhz.source


def test_sysfs_max_clock_wins_over_the_model_name() -> None:
    cpu = hw.cpu_from_cpuinfo(INTEL_BARE_METAL, cpufreq_max_khz=3_700_000)
    assert cpu.clock_mhz.value == pytest.approx(3700.0) and "turbo" in cpu.clock_mhz.source


def test_cpu_mhz_is_used_when_nothing_better_exists() -> None:
    text = X86_VM_NO_MHZ.replace("flags", "cpu MHz\t\t: 2596.120\nflags")
    cpu = hw.cpu_from_cpuinfo(text)
    assert cpu.clock_mhz.value == pytest.approx(2596.12) and "cpu MHz" in cpu.clock_mhz.source


def test_vm_without_mhz_reports_the_clock_unknown_with_a_reason() -> None:
    cpu = hw.cpu_from_cpuinfo(X86_VM_NO_MHZ)
    assert cpu.logical_cores.value == 8 and cpu.model.value == "AMD EPYC Processor"
    assert cpu.simd_bits.value == 256 and cpu.fma
    assert not cpu.clock_mhz.known
    assert "cpu MHz" in cpu.clock_mhz.reason and "--clock-mhz" in cpu.clock_mhz.reason
    # No core ids: physical cores fall back to logical, and say that it is an assumption.
    assert cpu.physical_cores.value == 8 and "assumed" in cpu.physical_cores.source
    theory, assumed = hw.theoretical_peak(cpu, fma_units=2)
    for fact in (theory, assumed):
        assert not fact.known and "clock" in fact.reason
    # Given the clock by flag, the peak is known again: 8 cores * 2 GHz * 8 lanes * 2 * 2.
    theory, _ = hw.theoretical_peak(cpu, fma_units=2, clock_mhz=2000)
    assert theory.value == pytest.approx(8 * 2.0 * 8 * 2 * 2)


def test_arm_graviton_is_named_by_part_number_and_has_neon_fma() -> None:
    cpu = hw.cpu_from_cpuinfo(ARM_GRAVITON2)
    assert cpu.architecture == "arm" and cpu.model.value == "ARM Neoverse-N1"
    assert cpu.simd_bits.value == 128 and cpu.fma and "asimd" in cpu.simd
    assert cpu.logical_cores.value == 4
    assert not cpu.clock_mhz.known and "ARM" in cpu.clock_mhz.reason


def test_arm_sve_width_comes_from_the_kernel_when_given() -> None:
    text = ARM_GRAVITON2.replace("asimdrdm", "asimdrdm sve")
    assert hw.cpu_from_cpuinfo(text, sve_bytes=32).simd_bits.value == 256
    fallback = hw.cpu_from_cpuinfo(text).simd_bits
    assert fallback.value == 128 and "SVE" in fallback.source


def test_raspberry_pi_machine_lines_and_armv7_neon() -> None:
    cpu = hw.cpu_from_cpuinfo(RASPBERRY_PI_4)
    assert cpu.model.value == "ARM Cortex-A72 (Raspberry Pi 4 Model B Rev 1.1)"
    assert cpu.logical_cores.value == 4  # the trailing Hardware block is not a processor
    assert cpu.simd_bits.value == 128 and cpu.fma and "neon" in cpu.simd


def test_cpuinfo_without_processors_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="no 'processor' blocks"):
        hw.cpu_from_cpuinfo("Hardware : BCM2711\n")


def test_meminfo_is_parsed_to_bytes() -> None:
    info = hw.parse_meminfo(MEMINFO)
    assert info["MemTotal"] == 16318480 * 1024
    assert info["HugePages_Total"] == 0


def test_read_cpu_and_ram_from_a_fake_proc(tmp_path: Path) -> None:
    (tmp_path / "cpuinfo").write_text(X86_VM_NO_MHZ)
    (tmp_path / "meminfo").write_text(MEMINFO)
    cpu = hw.read_cpu(proc=tmp_path, sys_cpu=tmp_path / "no-sysfs")
    assert cpu.logical_cores.value == 8 and not cpu.clock_mhz.known
    assert cpu.usable_cores.value >= 1  # from this process's affinity, not from the text
    assert hw.read_ram(proc=tmp_path).value == 16318480 * 1024


def test_cgroup_quota() -> None:
    assert hw.cgroup_cpu_limit("max 100000") is None
    assert hw.cgroup_cpu_limit("150000 100000\n") == pytest.approx(1.5)


def test_this_machine_is_plausible() -> None:
    cpu = hw.read_cpu()
    assert cpu.logical_cores.value >= 1
    assert 1 <= cpu.usable_cores.value <= cpu.logical_cores.value
    assert 1 <= cpu.physical_cores.value <= cpu.logical_cores.value
    ram = hw.read_ram()
    assert ram.known and 2**26 < ram.value < 2**50


# --------------------------------------------------------------------------- formulas


def test_bandwidth_formula_reproduces_the_source_example() -> None:
    # (1466.67 MHz * 2) * 8 B * 4 channels = 93,866.88 MB/s, about 94 GB/s.
    mb_s = hw.bandwidth_mb_s(hw.ddr_transfers(1466.67), bus_bytes=8, channels=4)
    assert round(mb_s, 2) == 93866.88
    assert hw.bandwidth_mb_s(2933, 8, 1) == 23464  # one channel of DDR4-2933 by its MT/s name


def test_theoretical_bandwidth_from_flags_or_unknown_with_reason() -> None:
    known = hw.theoretical_bandwidth(2933, 4)
    assert known.value == pytest.approx(93.856) and known.unit == "GB/s"
    missing = hw.theoretical_bandwidth(2933, None)
    assert not missing.known and "--channels" in missing.reason and "dmidecode" in missing.reason
    with pytest.raises(ValueError, match="must all be positive"):
        hw.bandwidth_mb_s(2933, 8, 0)


def test_flops_per_cycle_and_peak_arithmetic() -> None:
    assert hw.flops_per_cycle(512, fma=True, fma_units=2) == 64  # 16 lanes * 2 * 2
    assert hw.flops_per_cycle(256, fma=True, fma_units=2) == 32
    assert hw.flops_per_cycle(128, fma=False, fma_units=1) == 4
    assert hw.flops_per_cycle(256, fma=True, fma_units=1, dtype_bits=64) == 8
    assert hw.peak_flops(4, 2.0e9, 64) == pytest.approx(512e9)
    with pytest.raises(ValueError, match="fma_units"):
        hw.flops_per_cycle(256, fma=True, fma_units=0)


def test_theoretical_peak_needs_fma_units_and_labels_the_assumption() -> None:
    cpu = hw.cpu_from_cpuinfo(INTEL_BARE_METAL)  # 2 physical cores usable, 2400 MHz, AVX-512
    theory, assumed = hw.theoretical_peak(cpu, fma_units=None)
    assert not theory.known and "--fma-units" in theory.reason
    assert assumed.value == pytest.approx(2 * 2.4 * 16 * 2 * hw.ASSUMED_FMA_UNITS)
    assert assumed.source.startswith("ASSUMPTION")
    theory, _ = hw.theoretical_peak(cpu, fma_units=1)
    assert theory.value == pytest.approx(2 * 2.4 * 16 * 2 * 1) and "--fma-units" in theory.source
    capped, _ = hw.theoretical_peak(cpu, fma_units=1, max_cores=1)
    assert capped.value == pytest.approx(theory.value / 2)


def test_matmul_flop_count_and_intensity() -> None:
    assert hw.matmul_flops(3) == 54 and hw.matmul_flops(2048) == 2 * 2048**3
    assert hw.matmul_intensity(6) == pytest.approx(1.0)  # n/6 FLOPs per byte in float32
    assert hw.matmul_intensity(1024) == pytest.approx(1024 / 6)


def test_measured_above_theory_turns_the_theory_into_a_reasoned_unknown() -> None:
    theory = hw.Fact(100.0, "GFLOP/s", "formula")
    ok, verdict = hw.check_measured(theory, hw.Fact(60.0, "GFLOP/s"), "peak", "clock?")
    assert ok is theory and "60%" in verdict
    bad, verdict = hw.check_measured(theory, hw.Fact(150.0, "GFLOP/s"), "peak", "clock?")
    assert not bad.known and "100.0" in bad.reason and "150.0" in bad.reason
    assert "clock?" in bad.reason and "CONTRADICTED" in verdict
    assert hw.Fact(None, reason="why").text() == "unknown: why"


def test_measurements_are_positive_and_finite() -> None:
    bandwidth = hw.measure_bandwidth(8 * 2**20, repeats=2)
    matmul = hw.measure_matmul(64, repeats=2)
    assert 0.01 < bandwidth.value < 1e4 and bandwidth.unit == "GB/s"
    assert 1e-3 < matmul.value < 1e6 and matmul.unit == "GFLOP/s"


# --------------------------------------------------------------------------- probes


def _finish(code: str, timeout: float = 30.0) -> dict[str, Any]:
    run = gp.start_probe("fake", [sys.executable, "-c", code])
    return gp.finish_probe(run, timeout)


def test_a_crashing_probe_is_reported_not_raised() -> None:
    report = _finish("import sys; sys.stderr.write('boom: segfault-ish\\n'); sys.exit(3)")
    assert report["status"] == "crashed" and "exit status 3" in report["detail"]
    assert "boom" in report["detail"] and report["gpus"] == []


def test_a_hanging_probe_times_out() -> None:
    report = _finish("import time; time.sleep(30)", timeout=1.0)
    assert report["status"] == "timed out" and "1 s" in report["detail"]


def test_garbage_output_is_a_crash() -> None:
    assert _finish("print('hello')")["status"] == "crashed"


def test_probe_of_a_framework_that_may_be_missing() -> None:
    report = gp.probe_frameworks(["numpy", "cupy"], timeout=60)
    assert report["numpy"]["status"] == "ok"
    import numpy as np

    assert report["numpy"]["version"] == np.__version__
    if importlib.util.find_spec("cupy") is None:
        assert report["cupy"]["status"] == "not installed" and "cupy" in report["cupy"]["detail"]
    else:  # installed: either it sees GPUs or it says why not
        assert report["cupy"]["status"] in ("ok", "error")


# --------------------------------------------------------------------------- the explanation

NO_DRIVER: dict[str, Any] = {"present": False, "version": None, "max_cuda": None, "gpus": []}
CPU_ONLY: dict[str, dict[str, Any]] = {
    "numpy": {"status": "ok", "version": "2.0", "gpus": []},
    "cupy": {"status": "not installed", "detail": "No module named 'cupy'", "gpus": []},
    "torch": {"status": "ok", "version": "2.5.0+cpu", "cuda": None, "cuda_build": False,
              "gpus": []},
    "tensorflow": {"status": "ok", "version": "2.17.0", "cuda_build": False, "gpus": [],
                   "gpu_device_name": "", "distributions": {"tensorflow-cpu": "2.17.0"}},
}


def test_explanation_without_a_driver_names_every_cause(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    text = gp.gpu_explanation(CPU_ONLY, NO_DRIVER)
    assert text is not None and "\n" not in text  # one paragraph
    assert "No NVIDIA GPU" in text and "nvidia-smi" in text
    assert "PyTorch 2.5.0+cpu is a CPU-only build" in text
    assert "tensorflow-cpu package is installed" in text
    assert "cupy is not installed" in text and "cuDNN" in text


def test_explanation_with_a_driver_but_a_mismatched_build(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    driver = {"present": True, "version": "470.57", "max_cuda": "11.4", "gpus": []}
    reports = {"torch": {"status": "ok", "version": "2.5.0", "cuda": "12.4", "cudnn": 90100,
                         "cuda_build": True, "gpus": []}}
    text = gp.gpu_explanation(reports, driver)
    assert text is not None
    assert "470.57" in text and "11.4" in text and "CUDA 12.4 or newer" in text
    assert "CUDA_VISIBLE_DEVICES" in text


def test_no_explanation_when_every_framework_sees_a_gpu() -> None:
    gpu = [{"index": 0, "name": "Tesla V100", "memory_bytes": 16 * 2**30}]
    reports = {"torch": {"status": "ok", "gpus": gpu}, "cupy": {"status": "ok", "gpus": gpu}}
    assert gp.gpu_explanation(reports, {"present": True}) is None
