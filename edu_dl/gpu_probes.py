"""Which GPUs NumPy/CuPy, PyTorch and TensorFlow each see, the NVIDIA driver, and what to check.

Each framework is probed in a worker process of its own (``edu_dl.util.worker``), never two in
one process: each framework loads its own CUDA and cuDNN libraries, and in one process the
first one loaded wins, so a second framework can fail or crash only because of the first; a
broken CUDA install can also crash the process outright or hang on import. In a process of its own
a probe sees what that framework alone would see, a crash or hang becomes a status with a reason
instead of taking ``edu-dl doctor`` down, and the probes run in parallel.

The CPU and memory facts (:class:`~edu_dl.machine.hardware.Fact`, the formulas, the measurements) are in
:mod:`edu_dl.machine.hardware`.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

from edu_dl.util.worker import Worker, WorkerError

# --------------------------------------------------------------------------- GPUs and frameworks

FRAMEWORKS: tuple[str, ...] = ("numpy", "cupy", "torch", "tensorflow")
PROBE_TIMEOUT_S = 120.0  # importing TensorFlow on a busy 2-core machine can take 30 s


def _probe_numpy() -> dict[str, Any]:
    return {"version": np.__version__, "gpus": []}


def _probe_cupy() -> dict[str, Any]:
    import cupy

    info: dict[str, Any] = {"version": cupy.__version__, "gpus": []}
    runtime = cupy.cuda.runtime
    info["cuda"] = _cuda_version(runtime.runtimeGetVersion())
    info["driver_cuda"] = _cuda_version(runtime.driverGetVersion())
    try:
        from cupy.cuda import cudnn

        info["cudnn"] = str(cudnn.getVersion())
    except Exception:  # cuDNN is optional for CuPy
        info["cudnn"] = None
    for i in range(runtime.getDeviceCount()):  # raises without a driver: reported by the caller
        props = runtime.getDeviceProperties(i)
        name = props["name"]
        info["gpus"].append(
            {
                "index": i,
                "name": name.decode() if isinstance(name, bytes) else str(name),
                "memory_bytes": int(props["totalGlobalMem"]),
            }
        )
    return info


def _cuda_version(code: int) -> str:
    """CUDA's integer version (12040) as text ('12.4')."""
    return f"{code // 1000}.{code % 1000 // 10}"


def _probe_torch() -> dict[str, Any]:
    import torch

    info: dict[str, Any] = {
        "version": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "cuda_build": torch.version.cuda is not None,
        "gpus": [],
    }
    if torch.cuda.is_available():
        for i in range(torch.cuda.device_count()):
            props = torch.cuda.get_device_properties(i)
            info["gpus"].append(
                {"index": i, "name": torch.cuda.get_device_name(i),
                 "memory_bytes": int(props.total_memory)}
            )
    return info


def _probe_tensorflow() -> dict[str, Any]:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import tensorflow as tf

    build = dict(tf.sysconfig.get_build_info())
    return {
        "version": tf.__version__,
        "cuda": build.get("cuda_version"),
        "cudnn": build.get("cudnn_version"),
        "cuda_build": bool(build.get("is_cuda_build")),
        # The source material's check: '/device:GPU:0' when there is a GPU, '' when not.
        "gpu_device_name": tf.test.gpu_device_name(),
        "gpus": [
            {"index": i, "name": d.name, "memory_bytes": None}
            for i, d in enumerate(tf.config.list_physical_devices("GPU"))
        ],
    }


_PROBES = {
    "numpy": _probe_numpy,
    "cupy": _probe_cupy,
    "torch": _probe_torch,
    "tensorflow": _probe_tensorflow,
}


def probe(name: str) -> dict[str, Any]:
    """In the probe's own process: what framework ``name`` sees, whatever happens."""
    try:
        return {"status": "ok", **_PROBES[name]()}
    except ImportError as exc:
        return {"status": "not installed", "detail": str(exc), "gpus": []}
    except Exception as exc:  # a CUDA error, a broken install: reported, not raised
        return {"status": "error", "detail": f"{type(exc).__name__}: {exc}", "gpus": []}


@dataclass
class ProbeRun:
    """A probe process started in the background."""

    name: str
    worker: Worker
    started: float = field(default_factory=time.monotonic)


def start_probe(name: str, argv: Sequence[str] | None = None) -> ProbeRun:
    """Start the probe of ``name`` in a worker process (``argv``: another program, for tests)."""
    worker = Worker(f"{name} probe", argv=argv)
    worker.send(f"{__name__}:probe", name=name)
    return ProbeRun(name, worker)


def finish_probe(run: ProbeRun, timeout: float = PROBE_TIMEOUT_S) -> dict[str, Any]:
    """The probe's report; a crash, a hang or garbage becomes a status with a reason."""
    left = max(0.1, timeout - (time.monotonic() - run.started))
    try:
        report = run.worker.receive(left)
        if not isinstance(report, dict):
            raise WorkerError(f"a {type(report).__name__}, not a report", "died", 0)
        return {"name": run.name, **report}
    except WorkerError as exc:
        if exc.kind == "timeout":
            return {"name": run.name, "status": "timed out",
                    "detail": f"no answer within {timeout:g} s", "gpus": []}
        how = f"exit status {exc.returncode}" if exc.returncode else "no report"
        return {"name": run.name, "status": "crashed", "detail": f"{how}: {exc.tail or exc}",
                "gpus": []}
    finally:
        run.worker.close()


def probe_frameworks(
    names: Sequence[str] = FRAMEWORKS, timeout: float = PROBE_TIMEOUT_S
) -> dict[str, dict[str, Any]]:
    """Each framework's report, probed in parallel processes (never two in one process)."""
    runs = [start_probe(name) for name in names]
    reports = {run.name: finish_probe(run, timeout) for run in runs}
    tf = reports.get("tensorflow")
    if tf is not None:  # which pip package: the source's `pip show tensorflow-gpu`
        tf["distributions"] = installed_distributions(
            ("tensorflow", "tensorflow-cpu", "tensorflow-gpu", "tensorflow-intel")
        )
    return reports


def installed_distributions(names: Sequence[str]) -> dict[str, str]:
    """{pip name: version} for those of ``names`` that are installed."""
    found = {}
    for name in names:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return found


def nvidia_driver(timeout: float = 10.0) -> dict[str, Any]:
    """The NVIDIA driver as the OS sees it: version, highest CUDA it supports, GPUs listed."""
    info: dict[str, Any] = {"present": False, "version": None, "max_cuda": None, "gpus": []}
    try:
        text = Path("/proc/driver/nvidia/version").read_text()
        info["present"] = True
        match = re.search(r"Kernel Module\s+([\d.]+)", text)
        info["version"] = match.group(1) if match else None
    except OSError:
        pass
    smi = shutil.which("nvidia-smi")
    info["nvidia_smi"] = smi
    if smi:
        try:
            header = subprocess.run([smi], capture_output=True, text=True, timeout=timeout)
            match = re.search(r"CUDA Version:\s*([\d.]+)", header.stdout)
            info["max_cuda"] = match.group(1) if match else None
            query = subprocess.run(
                [smi, "--query-gpu=index,name,driver_version,memory.total",
                 "--format=csv,noheader"],
                capture_output=True, text=True, timeout=timeout,
            )
            for line in query.stdout.strip().splitlines():
                index, name, version, memory = (part.strip() for part in line.split(",")[:4])
                info["gpus"].append({"index": index, "name": name, "memory": memory})
                info["version"] = info["version"] or version
                info["present"] = True
        except (OSError, subprocess.SubprocessError, ValueError) as exc:
            info["error"] = f"nvidia-smi failed: {exc}"
    return info


def gpu_explanation(frameworks: dict[str, dict[str, Any]], driver: dict[str, Any]) -> str | None:
    """One paragraph on why a GPU is absent or unseen and what to check; None if all see one."""
    gpu_frameworks = {k: v for k, v in frameworks.items() if k != "numpy"}
    blind = {k: v for k, v in gpu_frameworks.items() if not v.get("gpus")}
    if not blind:
        return None
    says: list[str] = []
    if not driver.get("present"):
        says.append(
            "No NVIDIA GPU is visible on this machine: there is no NVIDIA driver "
            "(/proc/driver/nvidia/version is missing and nvidia-smi is not on the PATH), so no "
            "framework can use CUDA. That is normal on a laptop without an NVIDIA card, on a Mac, "
            "and in a CPU-only VM or container (a container also needs the NVIDIA Container "
            "Toolkit and `--gpus all`). Everything in the course runs on the CPU; for the GPU "
            "lessons use a machine with an NVIDIA GPU (a lab machine, Colab or a rented cloud GPU)."
        )
    else:
        says.append(
            f"The NVIDIA driver {driver.get('version') or '(version unknown)'} is present and "
            f"supports CUDA up to {driver.get('max_cuda') or '(unknown)'}, yet not every framework "
            "sees the GPU."
        )
    hidden = os.environ.get("CUDA_VISIBLE_DEVICES")
    if hidden is not None and hidden.strip() in ("", "-1"):
        says.append(f"CUDA_VISIBLE_DEVICES={hidden!r} hides every GPU from every framework.")
    for name, report in blind.items():
        says.append(_framework_advice(name, report, driver))
    says.append(
        "What to check: `nvidia-smi` runs and lists the GPU; the driver supports the CUDA version "
        "each framework was built for; the cuDNN version matches the TensorFlow build "
        "(TensorFlow's tested build configurations); and the GPU builds, not the CPU-only ones, "
        "are installed."
    )
    return " ".join(says)


def _framework_advice(name: str, report: dict[str, Any], driver: dict[str, Any]) -> str:
    status, version = report.get("status"), report.get("version", "")
    if status == "not installed":
        cupy = "cupy-cuda12x" if str(driver.get("max_cuda") or "").startswith("12.") else \
            "cupy-cuda13x"
        hint = {"cupy": f"`make lab GPU=1`, or pip install {cupy}", "torch": "pip install torch",
                "tensorflow": "pip install 'tensorflow[and-cuda]'"}.get(name, "")
        return f"{name} is not installed{f' ({hint} on a CUDA machine)' if hint else ''}."
    if status != "ok":
        return f"{name} could not be checked ({status}: {report.get('detail', '')})."
    if name == "torch" and not report.get("cuda_build"):
        return (
            f"PyTorch {version} is a CPU-only build (torch.version.cuda is None): install a CUDA "
            "build from pytorch.org for a CUDA version the driver supports."
        )
    if name == "tensorflow" and not report.get("cuda_build"):
        cpu_pkg = "tensorflow-cpu" in report.get("distributions", {})
        return (
            f"TensorFlow {version} is a CPU-only build ("
            + ("the tensorflow-cpu package is installed" if cpu_pkg else "is_cuda_build is False")
            + "; tf.test.gpu_device_name() returns ''): on Linux with an NVIDIA GPU install "
            "tensorflow[and-cuda], which brings the CUDA and cuDNN versions it was built for."
        )
    cuda, cudnn = report.get("cuda"), report.get("cudnn")
    built = f"built for CUDA {cuda}" + (f" and cuDNN {cudnn}" if cudnn else "")
    if driver.get("present"):
        return (
            f"{name} {version} is {built} but sees no GPU: the driver must support CUDA {cuda} "
            "or newer, and those CUDA/cuDNN libraries must be found (LD_LIBRARY_PATH)."
        )
    return f"{name} {version} is {built} but there is no NVIDIA driver for it to use."
