"""Run CUDA kernels without a GPU: Numba's simulator, in its own process, shared memory as NaN.

The simulator (``NUMBA_ENABLE_CUDASIM=1``) runs every CUDA thread as a Python thread: exact, slow.
The trap: Numba reads the variable when ``numba.cuda`` is FIRST imported, and a process cannot
switch afterwards. ``run_in_simulator`` therefore starts a fresh Python process with the variable
set (a worker of ``edu_dl.util.worker``), runs a function there on NumPy arguments and returns its
results (or the error it raised), so the calling process keeps its real ``numba.cuda``.

Shared memory is filled with NaN when allocated and again before every block: a kernel that reads
a shared slot before the thread owning it wrote it (a missing ``cuda.syncthreads()``) then gives
NaN instead of a plausible stale value.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import os
import sys
import tempfile
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

ENV_VAR = "NUMBA_ENABLE_CUDASIM"
DEFAULT_TIMEOUT_S = 300.0


class SimulatorError(RuntimeError):
    """A function run under the simulator raised; ``message`` is "Type: text" from that process."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


# --------------------------------------------------------------------------- this process


def _gpu_present() -> bool:
    """True when a CUDA GPU is usable (CuPy sees one, or the driver reports one). Never raises.

    Asks CuPy or the driver library directly, NOT numba.cuda: importing numba.cuda would fix this
    process to real CUDA before the caller could choose the simulator.
    """
    from edu_dl import backend

    return backend.gpu_status()[0] or bool(backend.driver_device_count())


def _numba_probe() -> bool:
    """In a worker with the real CUDA target: compile and launch one kernel; True if it ran."""
    from edu_dl.gpu.kernels import relu  # imports numba.cuda: this process's real CUDA

    return bool((relu(np.array([-1.0, 2.0], dtype=np.float32)) == [0.0, 2.0]).all())


def numba_gpu_works(timeout_s: float = 120.0) -> bool:
    """True when Numba can compile and run a kernel on a real GPU (tried in a fresh process).

    A GPU alone is not enough: Numba also needs the CUDA compiler libraries (NVVM), which the
    ``numba-cuda[cu12]`` / ``[cu13]`` extras install. The probe runs elsewhere so that this process
    can still choose the simulator.
    """
    if not _gpu_present():
        return False
    from edu_dl.util.worker import WorkerError, run_in_worker

    try:
        works: bool = run_in_worker(f"{__name__}:_numba_probe", name="Numba CUDA probe",
                                    timeout_s=timeout_s, env={ENV_VAR: "0"})
    except WorkerError:
        return False
    return works


def simulator_active() -> bool:
    """Whether numba.cuda is (or, when first imported, will be) the simulator in this process."""
    cuda = sys.modules.get("numba.cuda")
    if cuda is None:
        return os.environ.get(ENV_VAR, "0") == "1"
    config = getattr(cuda, "config", None)
    return bool(int(getattr(config, "ENABLE_CUDASIM", 0)))


def enable_simulator(nan_shared: bool = True) -> ModuleType:
    """Switch this process to the simulator and return ``numba.cuda``; must precede its import."""
    if "numba.cuda" in sys.modules and not simulator_active():
        raise RuntimeError(
            f"numba.cuda was already imported without the simulator, and a process cannot switch: "
            f"set {ENV_VAR}=1 before the first `from numba import cuda` (restart the kernel), or "
            f"run the code in a fresh process with edu_dl.gpu.simulator.run_in_simulator"
        )
    os.environ[ENV_VAR] = "1"
    cuda = importlib.import_module("numba.cuda")
    if nan_shared:
        fill_shared_with_nan()
    return cuda


# Without it, threads that reach a shared array's first allocation together could each make
# their own (seen: a tiled transpose reading NaN from a tile its neighbours never wrote).
_ALLOCATION_LOCK = threading.Lock()


def _poison(arr: np.ndarray) -> None:
    """Fill a fresh shared array: NaN for floats, the largest value for integers."""
    if arr.dtype.kind in "fc":
        arr.fill(np.nan)
    elif arr.dtype.kind in "iu":
        arr.fill(np.iinfo(arr.dtype).max)


def fill_shared_with_nan() -> None:
    """Make the simulator's ``cuda.shared.array`` start as NaN in every block (idempotent).

    Numba's simulator allocates shared arrays with ``np.empty`` once per launch and keeps them
    across blocks, so a missing syncthreads reads stale numbers that may look right. This replaces
    its allocator (keyed, as Numba's is, by the calling file and line) and refills before each
    block.
    """
    if not simulator_active():
        raise RuntimeError(f"fill_shared_with_nan: the CUDA simulator is not active ({ENV_VAR}=1 "
                           f"must be set before numba.cuda is imported)")
    from numba.cuda.simulator import kernel as sim_kernel
    from numba.cuda.simulator import kernelapi

    # Any: these are Numba internals, patched on purpose.
    shared_cls: Any = kernelapi.FakeCUDAShared
    manager_cls: Any = sim_kernel.BlockManager
    if getattr(shared_cls, "_edu_dl_nan", False):
        return
    numba_array, numba_run = shared_cls.array, manager_cls.run

    def array(self: Any, shape: Any, dtype: Any, alignment: Any = None) -> np.ndarray:
        if shape == 0 or alignment is not None:  # dynamic shared memory: Numba's own path
            return numba_array(self, shape, dtype, alignment)
        caller = sys._getframe(1)
        key = (caller.f_code.co_filename, caller.f_lineno)
        with _ALLOCATION_LOCK:  # the block's threads arrive together: all must get ONE array
            res = self._allocations.get(key)
            if res is None:
                if isinstance(dtype, kernelapi.types.Type):  # numba's float32 -> numpy's
                    dtype = kernelapi.numpy_support.as_dtype(dtype)
                res = np.empty(shape, dtype)
                _poison(res)
                self._allocations[key] = res
        return res

    def run(self: Any, grid_point: Any, *args: Any) -> Any:
        context = sim_kernel._get_kernel_context()
        if context is not None:
            for arr in context.shared._allocations.values():
                _poison(arr)
        return numba_run(self, grid_point, *args)

    shared_cls.array = array
    manager_cls.run = run
    shared_cls._edu_dl_nan = True


# --------------------------------------------------------------------------- another process


@dataclass(frozen=True)
class Outcome:
    """What one call returned under the simulator: ``value``, or ``error`` ("Type: message")."""

    value: Any = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        """True when the call returned without raising."""
        return self.error is None

    def unwrap(self) -> Any:
        """The value, or SimulatorError with the error text."""
        if self.error is not None:
            raise SimulatorError(self.error)
        return self.value


def _target_of(fn: Callable[..., Any] | str) -> str:
    """'module:qualname' (or 'path/file.py:qualname') that a fresh process can import."""
    if isinstance(fn, str):
        return fn
    module, qualname = getattr(fn, "__module__", None), getattr(fn, "__qualname__", "")
    if "<locals>" in qualname or not module:
        raise TypeError(f"run_in_simulator needs a module-level function, got {qualname or fn!r}")
    if module != "__main__":
        return f"{module}:{qualname}"
    try:
        path = inspect.getsourcefile(fn)
    except TypeError:
        path = None
    if not path or not Path(path).is_file():
        raise TypeError(
            f"run_in_simulator cannot import {qualname!r} from a notebook or the interactive "
            f"session; put it in a .py file, or set {ENV_VAR}=1 in the notebook's first cell"
        )
    return f"{path}:{qualname}"


def _resolve(target: str) -> Callable[..., Any]:
    """The function named by 'module:qualname' or 'path/file.py:qualname'."""
    where, _, qualname = target.rpartition(":")
    if where.endswith(".py"):
        spec = importlib.util.spec_from_file_location(Path(where).stem, where)
        if spec is None or spec.loader is None:
            raise ImportError(f"cannot load {where}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
    else:
        module = importlib.import_module(where)
    obj: Any = module
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def _save_cases(path: Path, cases: Sequence[tuple[Any, ...]]) -> None:
    """Arguments as case{i}_arg{j} arrays (numbers become 0-d arrays); no pickle."""
    arrays: dict[str, np.ndarray] = {"n_cases": np.asarray(len(cases))}
    for i, case in enumerate(cases):
        arrays[f"case{i}_n_args"] = np.asarray(len(case))
        for j, arg in enumerate(case):
            arrays[f"case{i}_arg{j}"] = np.asarray(arg)
    np.savez(path, **arrays)  # type: ignore[arg-type]  # numpy stubs mistake kwargs for allow_pickle


def _load_cases(path: Path) -> list[tuple[Any, ...]]:
    """The inverse of _save_cases: 0-d arrays come back as NumPy scalars."""
    with np.load(path, allow_pickle=False) as data:
        cases = []
        for i in range(int(data["n_cases"])):
            args = [data[f"case{i}_arg{j}"] for j in range(int(data[f"case{i}_n_args"]))]
            cases.append(tuple(a[()] if a.ndim == 0 else a for a in args))
    return cases


def _error_text(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def simulate_cases(target: str, inp: str, out: str) -> None:
    """In the worker: run TARGET on every case in IN.npz under the simulator, write OUT.npz."""
    enable_simulator(nan_shared=True)
    arrays: dict[str, np.ndarray] = {}
    cases = _load_cases(Path(inp))
    try:
        fn = _resolve(target)
    except Exception as exc:  # report, do not crash: the parent shows it for every case
        fn, load_error = None, _error_text(exc)
    for i, case in enumerate(cases):
        if fn is None:
            arrays[f"case{i}_error"] = np.asarray(load_error)
            continue
        try:
            value = fn(*case)
        except Exception as exc:
            arrays[f"case{i}_error"] = np.asarray(_error_text(exc))
            continue
        values = value if isinstance(value, tuple) else (value,)
        arrays[f"case{i}_is_tuple"] = np.asarray(isinstance(value, tuple))
        arrays[f"case{i}_n_out"] = np.asarray(len(values))
        for j, v in enumerate(values):
            arrays[f"case{i}_out{j}"] = np.asarray(v)
    np.savez(out, **arrays)  # type: ignore[arg-type]


def _load_outcomes(path: Path, n_cases: int) -> list[Outcome]:
    outcomes = []
    with np.load(path, allow_pickle=False) as data:
        for i in range(n_cases):
            if f"case{i}_error" in data:
                outcomes.append(Outcome(error=str(data[f"case{i}_error"])))
                continue
            values = tuple(data[f"case{i}_out{j}"] for j in range(int(data[f"case{i}_n_out"])))
            values = tuple(v[()] if v.ndim == 0 else v for v in values)
            outcomes.append(Outcome(value=values if bool(data[f"case{i}_is_tuple"]) else values[0]))
    return outcomes


def run_in_simulator(
    fn: Callable[..., Any] | str,
    cases: Sequence[tuple[Any, ...]],
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> list[Outcome]:
    """Call ``fn(*case)`` for each case in ONE fresh process with the CUDA simulator on.

    ``fn`` is a module-level function (or 'module:qualname' / 'file.py:qualname'); arguments and
    results are NumPy arrays or numbers. Exceptions raised by a case come back as Outcome.error.
    """
    from edu_dl.util.worker import WorkerError, run_in_worker

    target = _target_of(fn)
    # The child sees what this process imports from: the project, the tests folder, site-packages.
    path = [p for p in sys.path if p and Path(p).is_dir()]
    with tempfile.TemporaryDirectory(prefix="edu_dl_cudasim_") as tmp:
        inp, out = Path(tmp) / "in.npz", Path(tmp) / "out.npz"
        _save_cases(inp, cases)
        try:
            run_in_worker(f"{__name__}:simulate_cases", name=f"CUDA simulator for {target}",
                          timeout_s=timeout_s, env={ENV_VAR: "1"}, pythonpath=path,
                          target=target, inp=str(inp), out=str(out))
        except WorkerError as exc:
            if exc.kind == "timeout":
                raise SimulatorError(
                    f"TimeoutError: {target} did not finish under the CUDA simulator within "
                    f"{timeout_s:g} s (it runs one Python thread per CUDA thread: use small "
                    "sizes)") from exc
            raise SimulatorError(f"the simulator process for {target} failed (exit code "
                                 f"{exc.returncode}): {exc.tail or exc}") from exc
        return _load_outcomes(out, len(cases))


def simulate(fn: Callable[..., Any] | str, *args: Any, timeout_s: float = DEFAULT_TIMEOUT_S) -> Any:
    """``fn(*args)`` run in a fresh simulator process; raises SimulatorError if it raised."""
    return run_in_simulator(fn, [args], timeout_s)[0].unwrap()
