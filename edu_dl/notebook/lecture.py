"""Small helpers the lecture notebooks share: quiet TensorFlow, one plot style, GPU fallbacks.

Every notebook starts with ``from edu_dl.notebook.lecture import setup; setup()``.
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np

from edu_dl import backend

T = TypeVar("T")

# Okabe & Ito's colour-blind-safe palette (https://jfly.uni-koeln.de/color/).
PALETTE = ["#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442",
           "#000000"]


def quiet_tensorflow() -> None:
    """Keep TensorFlow's C++ log lines and oneDNN notices out of notebook outputs.

    Must run before TensorFlow is first imported; oneDNN is turned off so that results are
    reproducible bit for bit across runs.
    """
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")


def seed_everything(seed: int = 0) -> np.random.Generator:
    """Seed Python, NumPy (and PyTorch / TensorFlow if already imported); return a Generator."""
    random.seed(seed)
    np.random.seed(seed)  # noqa: NPY002 - code the student pastes may use the legacy API
    import sys

    if "torch" in sys.modules:
        sys.modules["torch"].manual_seed(seed)
    if "tensorflow" in sys.modules:
        sys.modules["tensorflow"].random.set_seed(seed)
    return np.random.default_rng(seed)


def plot_style() -> None:
    """The course's plot style: the colour-blind-safe palette, grids, readable sizes."""
    import matplotlib as mpl
    from cycler import cycler  # matplotlib's own dependency

    mpl.rcParams.update({
        "axes.prop_cycle": cycler(color=PALETTE),
        "axes.grid": True,
        "grid.alpha": 0.3,
        "figure.figsize": (6.4, 3.6),
        "figure.dpi": 100,
        "axes.spines.top": False,
        "axes.spines.right": False,
    })


def setup(seed: int = 0) -> np.random.Generator:
    """Quiet TensorFlow, set the plot style, seed everything; returns a seeded Generator."""
    quiet_tensorflow()
    plot_style()
    return seed_everything(seed)


def device_or_cpu(device: str = "gpu") -> str:
    """``device`` if it can be used here, else 'cpu' after one clear sentence saying why."""
    if device == "cpu" or backend.gpu_available():
        return device
    print(f"No GPU here ({backend.gpu_status()[1]}), so this runs on the CPU instead.")
    return "cpu"


def gpu_missing(needs: tuple[str, ...] = ("cupy",)) -> str | None:
    """Why the libraries in ``needs`` cannot run on a GPU here, or None when all of them can
    (each library's own answer: ``edu_dl.backend.gpu_status``)."""
    unknown = [name for name in needs if name not in backend.GPU_FRAMEWORKS]
    if unknown:
        raise ValueError(f"gpu_missing: unknown libraries {unknown}; choose from "
                         f"{sorted(backend.GPU_FRAMEWORKS)}")
    # CuPy first when asked for: it is cheap and says why when there is no GPU at all.
    for name in sorted(needs, key=lambda n: n != "cupy"):
        usable, reason = backend.gpu_status(name)
        if not usable:
            return reason
    return None


def on_gpu(
    fn: Callable[[], T], what: str = "this GPU section", needs: tuple[str, ...] = ("cupy",)
) -> T | None:
    """Run ``fn`` when every library in ``needs`` can use a GPU; otherwise print one sentence
    and return None."""
    reason = gpu_missing(needs)
    if reason is not None:
        print(f"No GPU here ({reason}): {what} is skipped; on a machine with an "
              f"NVIDIA GPU and `make lab GPU=1` it runs.")
        return None
    return fn()


def rounded(value: Any, digits: int = 6) -> Any:
    """Round numbers (or arrays) for printing in cells whose output nbval checks."""
    if isinstance(value, float | np.floating):
        return float(f"{float(value):.{digits}g}")
    if isinstance(value, np.ndarray):
        return np.array([float(f"{v:.{digits}g}") for v in value.ravel()]).reshape(value.shape)
    return value


# --------------------------------------------------------------------------- missing frameworks

# The import name of each framework a lecture may lack, and what installs it.
_FRAMEWORKS = {"tensorflow": "pip install tensorflow-cpu", "torch": "pip install torch",
               "cupy": "make lab GPU=1", "numba": "pip install numba"}


def framework_missing(name: str) -> str | None:
    """Why ``name`` (an import name: 'tensorflow', 'torch', ...) cannot be imported, or None."""
    import importlib

    try:
        importlib.import_module(name)
    except ImportError as exc:
        return f"{name} is not installed ({type(exc).__name__}: {exc})"
    return None


def with_framework(name: str, fn: Callable[[], T], what: str = "this section") -> T | None:
    """Run ``fn`` when ``name`` imports; otherwise print one sentence and return None.

    Later cells must not depend on what ``fn`` defines unless they are guarded the same way:
    check the returned value (None when skipped)."""
    reason = framework_missing(name)
    if reason is not None:
        how = _FRAMEWORKS.get(name, f"pip install {name}")
        print(f"{name} is missing here, so {what} is skipped (`{how}` brings it).")
        return None
    return fn()


# --------------------------------------------------------------------------- recorded GPU results


def recorded_gpu(benchmark: str, device: str | None = None) -> dict[str, Any] | None:
    """A result recorded on a real GPU under benchmarks/gpu/ (see edu_dl.bench.record), with a
    ``label`` naming device, date, versions and the command; None, after one sentence, if none."""
    from edu_dl.machine.recorded import recorded

    try:
        result = recorded(benchmark, device)
    except (FileNotFoundError, OSError):
        print(f"No GPU recording of {benchmark!r} exists yet: only this machine's results "
              "are shown.")
        return None
    facts = result["provenance"]
    command = facts.get(f"command {benchmark}", "see PROVENANCE")
    result["label"] = (f"recorded on {facts.get('device', '?')} ({facts.get('date', '?')}; "
                       f"{facts.get('versions', '?')}) by: {command}")
    return result
