"""Small helpers the lecture notebooks share: quiet TensorFlow, one plot style, GPU fallbacks.

Every notebook starts with ``from edu_dl.notebook.lecture import setup; setup()``, which also
registers the ``%%needs`` cell magic: a cell that starts with ``%%needs tensorflow`` runs unchanged
where TensorFlow imports and is skipped, after one sentence, where it does not.

The plumbing a lecture needs stays one line each: ``limit_threads(1)`` (or ``with
limit_threads(1):``), ``threads=threads_if_busy()``, ``for x in progress(items, desc=...)`` and
``show_provenance(recorded_gpu("matmul"))``-style provenance, printed in full once per lecture.
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable, Iterable
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
    """Quiet TensorFlow, set the plot style, seed everything, register ``%%needs`` (in IPython);
    returns a seeded Generator."""
    quiet_tensorflow()
    plot_style()
    register_needs_magic()
    return seed_everything(seed)


def device_or_cpu(device: str = "gpu") -> str:
    """``device`` if it can be used here, else 'cpu' after one clear sentence saying why."""
    if device == "cpu" or backend.gpu_status()[0]:
        return device
    print(f"No GPU here ({backend.gpu_status()[1]}), so this runs on the CPU instead.")
    return "cpu"


def why_no_gpu(needs: tuple[str, ...] = ("cupy",)) -> str | None:
    """Why the libraries in ``needs`` cannot run on a GPU here, or None when all of them can
    (each library's own answer: ``edu_dl.backend.gpu_status``)."""
    unknown = [name for name in needs if name not in backend.GPU_FRAMEWORKS]
    if unknown:
        raise ValueError(f"why_no_gpu: unknown libraries {unknown}; choose from "
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
    reason = why_no_gpu(needs)
    if reason is not None:
        print(_no_gpu(reason, what))
        return None
    return fn()


def _no_gpu(reason: str, what: str) -> str:
    """The one sentence printed instead of ``what`` where a GPU library has no GPU."""
    return (f"No GPU here ({reason}): {what} is skipped; on a machine with an NVIDIA GPU and "
            "`make lab GPU=1` it runs.")


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


def _skipped(name: str, what: str) -> str:
    """The one sentence printed instead of ``what`` when the framework ``name`` is missing."""
    how = _FRAMEWORKS.get(name, f"pip install {name}")
    return f"{name} is missing here, so {what} is skipped (`{how}` brings it)."


class CellFailed(Exception):
    """Raised by ``%%needs`` when the cell it ran failed, so that the notebook run stops there.

    The cell's own traceback is already on screen; this one renders as a single line."""

    def _render_traceback_(self) -> list[str]:  # IPython shows this instead of a second traceback
        return [f"{type(self).__name__}: {self}"]


def needs(line: str, cell: str) -> None:
    """The ``%%needs tensorflow`` cell magic (``%%needs torch cupy`` for several frameworks).

    Runs the cell unchanged, in the notebook's namespace, when every named framework imports;
    otherwise prints one sentence and skips it. Cells that use a skipped cell's names start with
    the same line, so they skip too instead of failing with NameError.

    ``gpu`` among the names asks for a CUDA GPU as well, one that every GPU library named beside
    it can use (``%%needs gpu torch``; CuPy when none is named): those libraries are asked as
    :func:`on_gpu` asks them, and a missing one is a reason there is no GPU here."""
    from IPython import get_ipython
    from IPython.core.error import UsageError

    names = line.split()
    if not names:
        raise UsageError("%%needs takes import names, for example: %%needs tensorflow "
                         "(and gpu for a CUDA GPU: %%needs gpu torch)")
    on_the_gpu = "gpu" in names
    gpu_libraries = tuple(n for n in names if on_the_gpu and n in backend.GPU_FRAMEWORKS)
    for name in names:
        if name != "gpu" and name not in gpu_libraries and framework_missing(name) is not None:
            print(_skipped(name, "this cell"))
            return
    if on_the_gpu:
        reason = why_no_gpu(gpu_libraries or ("cupy",))
        if reason is not None:
            print(_no_gpu(reason, "this cell"))
            return
    result = get_ipython().run_cell(cell, store_history=False)
    if not result.success:
        raise CellFailed("this cell failed (its traceback is above)")


def register_needs_magic() -> None:
    """Make ``%%needs`` available in the running IPython kernel; nothing outside IPython."""
    try:
        from IPython import get_ipython
    except ImportError:
        return
    shell = get_ipython()
    if shell is not None:
        shell.register_magic_function(needs, magic_kind="cell", magic_name="needs")


# --------------------------------------------------------------------------- threads and load

# Lectures time code on small shared machines (two cores in CI and on many laptops). Capping the
# thread pools keeps idle BLAS threads from spinning against the lecture's own reader threads, and
# gives frameworks compared side by side the same CPU, as `edu-dl bench` does.


class ThreadLimit:
    """Caps BLAS/OpenMP pools (threadpoolctl) and PyTorch's intra-op threads, if PyTorch is
    imported, at ``threads``; stays in force until ``restore()`` or the end of a ``with`` block."""

    def __init__(self, threads: int) -> None:
        import sys

        from threadpoolctl import threadpool_limits

        self._torch = sys.modules.get("torch")
        # Read before capping: where threadpoolctl sees PyTorch's OpenMP pool, capping it
        # changes what torch.get_num_threads() says.
        self._torch_threads = self._torch.get_num_threads() if self._torch else None
        self._pools = threadpool_limits(limits=threads)
        if self._torch is not None:
            self._torch.set_num_threads(threads)

    def restore(self) -> None:
        self._pools.restore_original_limits()
        if self._torch is not None:
            self._torch.set_num_threads(self._torch_threads)

    def __enter__(self) -> ThreadLimit:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.restore()


def limit_threads(threads: int = 1) -> ThreadLimit:
    """``limit_threads()`` for the rest of the lecture, ``with limit_threads():`` for one block."""
    return ThreadLimit(threads)


def threads_if_busy() -> int | None:
    """1 (after one sentence saying why) when the machine's 1-minute load average exceeds its
    usable cores, else None: the ``threads=`` for a benchmark that should not fight other work."""
    from edu_dl.machine import hardware

    load, cores = os.getloadavg()[0], hardware.read_cpu().usable_cores.value
    if load <= cores:
        return None
    print(f"The machine is busy (1-minute load average {load:.2f} on {cores} usable cores), so "
          "each library is capped at one thread.")
    return 1


# --------------------------------------------------------------------------- progress bars


def progress(iterable: Iterable[T], **options: Any) -> Iterable[T]:
    """``tqdm.auto``'s bar over ``iterable`` (a widget in Jupyter), off when TQDM_DISABLE is set.

    Notebook tests and ``make notebooks`` set TQDM_DISABLE=1, as bars print rates that differ on
    every run; tqdm's notebook bar passes ``disable=False`` itself and so ignores that variable
    (tqdm 4.70), hence this one line instead of ``disable=progress_disabled()`` in every loop."""
    from tqdm.auto import tqdm

    from edu_dl.util.progress import progress_disabled

    return tqdm(iterable, disable=progress_disabled(), **options)


# --------------------------------------------------------------------------- recorded GPU results


def recorded_gpu(benchmark: str, device: str | None = None, *, command: str | None = None
                 ) -> dict[str, Any] | None:
    """A result recorded on a real GPU under benchmarks/ (see ``edu_dl.machine.recorded``), with
    a ``label`` naming device, date, versions and the command; None, after one sentence, if none.

    The command is PROVENANCE's ``command <benchmark>`` line (or its only ``command`` line);
    ``command`` replaces it in the label where that line is a maintainer's note rather than what
    a student needs to know.
    """
    from edu_dl.machine.recorded import recorded

    try:
        result = recorded(benchmark, device)
    except (FileNotFoundError, OSError):
        print(f"No GPU recording of {benchmark!r} exists yet: only this machine's results "
              "are shown.")
        return None
    facts = result["provenance"]
    commands = [value for key, value in facts.items() if key.startswith("command ")]
    result["command"] = command or facts.get(f"command {benchmark}") or (
        commands[0] if len(commands) == 1 else "see PROVENANCE")
    result["label"] = (f"recorded on {facts.get('device', '?')} ({facts.get('date', '?')}; "
                       f"{facts.get('versions', '?')}) by: {result['command']}")
    return result


# The provenances this kernel (one lecture) has printed in full: the device, date and versions.
_shown_provenance: set[tuple[str, str, str]] = set()


def show_provenance(record: dict[str, Any]) -> None:
    """Print where, when and with what ``record`` (from ``recorded_gpu``) was measured: in full the
    first time a lecture shows that recording session, as one line referring back after that."""
    facts = record["provenance"]
    session = (facts.get("device", "?"), facts.get("date", "?"), facts.get("versions", "?"))
    command = record.get("command", "see PROVENANCE")
    if session in _shown_provenance:
        device = session[0].split(" (")[0]
        print(f"recorded on the same {device} as above ({session[1]}) by: {command}")
        return
    _shown_provenance.add(session)
    print(f"recorded on {session[0]} ({session[1]}; {session[2]}) by: {command}")
