"""Array namespaces: NumPy on the CPU, CuPy on a CUDA GPU.

Every NumPy-vs-CuPy special case of the project lives in this module. The engine asks for
``xp = get_xp(*arrays)`` and writes ``xp.exp(x)``; nothing else names NumPy or CuPy.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
from types import ModuleType
from typing import Any, Literal

import numpy as np

Device = Literal["cpu", "gpu"]
DEVICES: tuple[str, ...] = ("cpu", "gpu")

_HOW_TO_RUN_ON_CPU = (
    "Run on the CPU instead (device='cpu', the default), or, on a machine with an NVIDIA GPU, "
    "install the GPU variant with `make lab GPU=1`."
)


class DeviceError(RuntimeError):
    """A GPU was asked for where none can be used."""


def _import_cupy() -> ModuleType | None:
    try:
        return importlib.import_module("cupy")
    except Exception:  # ImportError, or a CUDA library that fails to load
        return None


GPU_FRAMEWORKS: tuple[str, ...] = ("cupy", "torch", "tensorflow", "numba")


def _cupy_status() -> tuple[bool, str]:
    cupy = _import_cupy()
    if cupy is None:
        return False, "CuPy is not installed"
    try:
        count = int(cupy.cuda.runtime.getDeviceCount())
    except Exception as exc:  # CUDARuntimeError without a driver or device
        return False, f"CuPy found no usable CUDA device ({type(exc).__name__}: {exc})"
    if count == 0:
        return False, "CuPy found no CUDA device"
    return True, f"{count} CUDA device(s)"


def _torch_status() -> tuple[bool, str]:
    try:
        torch = importlib.import_module("torch")
    except ImportError:
        return False, "PyTorch is not installed"
    if not torch.cuda.is_available():
        return False, f"PyTorch {torch.__version__} sees no CUDA device"
    return True, f"{torch.cuda.device_count()} CUDA device(s) visible to PyTorch"


def _tensorflow_status() -> tuple[bool, str]:
    try:
        tf = importlib.import_module("tensorflow")
    except ImportError:
        return False, "TensorFlow is not installed"
    gpus = tf.config.list_physical_devices("GPU")
    if not gpus:
        return False, f"TensorFlow {tf.__version__} sees no GPU"
    return True, f"{len(gpus)} GPU(s) visible to TensorFlow"


def driver_device_count() -> int | None:
    """CUDA devices the NVIDIA driver library reports (cuInit, cuDeviceGetCount); None without a
    working driver library. Asks libcuda directly: importing numba.cuda would fix this process to
    real CUDA before a caller could choose Numba's simulator."""
    import ctypes

    try:
        libcuda = ctypes.CDLL("libcuda.so.1")
        count = ctypes.c_int(0)
        if libcuda.cuInit(0) != 0 or libcuda.cuDeviceGetCount(ctypes.byref(count)) != 0:
            return None
    except Exception:  # no driver library (or not Linux): no GPU for Numba
        return None
    return count.value


def _numba_status() -> tuple[bool, str]:
    # find_spec, not an import: numba.cuda must stay unimported (see driver_device_count).
    if importlib.util.find_spec("numba") is None:
        return False, "Numba is not installed"
    count = driver_device_count()
    if not count:
        return False, "Numba finds no CUDA device (no NVIDIA driver reports one)"
    return True, f"{count} CUDA device(s) reported by the driver"


_STATUS = {"cupy": _cupy_status, "torch": _torch_status, "tensorflow": _tensorflow_status,
           "numba": _numba_status}


@functools.cache
def gpu_status(framework: str = "cupy") -> tuple[bool, str]:
    """(usable, reason): whether ``framework`` ('cupy', 'torch', 'tensorflow' or 'numba') can run
    on a CUDA GPU here, and if not, why not, as a clause ("CuPy is not installed").

    Each framework finds the GPU on its own (a CPU build of PyTorch sees none where CuPy does);
    frameworks are imported only when asked about, and the answer is cached per framework."""
    if framework not in _STATUS:
        raise ValueError(f"gpu_status: unknown framework {framework!r}; choose from "
                         f"{', '.join(GPU_FRAMEWORKS)}")
    try:
        return _STATUS[framework]()
    except Exception as exc:  # a broken install: no GPU, and the reason why
        return False, f"{framework} could not be checked ({type(exc).__name__}: {exc})"


def _refuse_unless_usable(status: tuple[bool, str]) -> None:
    usable, reason = status
    if not usable:
        raise DeviceError(f"No GPU is available: {reason}. {_HOW_TO_RUN_ON_CPU}")


def require_gpu_for(framework: str) -> None:
    """Raise one clear DeviceError, saying why and how to run on the CPU, when ``framework``
    ('cupy', 'torch', 'tensorflow', 'numba') cannot use a GPU here."""
    _refuse_unless_usable(gpu_status(framework))


def require_gpu() -> ModuleType:
    """Return the CuPy module, or raise one clear DeviceError saying how to run on the CPU."""
    _refuse_unless_usable(gpu_status())
    cupy = _import_cupy()
    assert cupy is not None
    return cupy


def _is_cupy_array(x: Any) -> bool:
    # Checking the type's module avoids importing CuPy (slow) just to say "not CuPy".
    return type(x).__module__.split(".", 1)[0] == "cupy"


def namespace_of(x: Any) -> ModuleType | None:
    """NumPy or CuPy for an array, None for a Python scalar (which fits any namespace)."""
    if isinstance(x, np.ndarray | np.generic):
        return np
    if _is_cupy_array(x):
        return require_gpu()
    if isinstance(x, int | float | bool | complex):
        return None
    raise TypeError(f"expected a NumPy or CuPy array or a Python number, got {type(x).__name__}")


def get_xp(*arrays: Any) -> ModuleType:
    """The array namespace shared by ``arrays`` (NumPy when all are numbers).

    Mixing NumPy (CPU) and CuPy (GPU) arrays is a TypeError: nothing is copied silently.
    """
    xp: ModuleType | None = None
    for a in arrays:
        if type(a) is np.ndarray:  # the common case, checked first for speed
            ns: ModuleType | None = np
        else:
            ns = namespace_of(a)
        if ns is None:
            continue
        if xp is None:
            xp = ns
        elif ns is not xp:
            raise TypeError(
                "arrays live on different devices (NumPy on the CPU and CuPy on the GPU); "
                "move them to one device first with to_device(x, 'cpu') or .to('cpu')"
            )
    return np if xp is None else xp


def device_of(x: Any) -> Device:
    """'gpu' for a CuPy array, 'cpu' otherwise."""
    return "gpu" if _is_cupy_array(x) else "cpu"


def check_device(device: str) -> Device:
    """Validate a device name; asking for 'gpu' without one is a DeviceError."""
    if device not in DEVICES:
        raise ValueError(f"unknown device {device!r}: choose 'cpu' or 'gpu'")
    if device == "gpu":
        require_gpu()
    return device  # type: ignore[return-value]


def xp_for(device: str) -> ModuleType:
    """The namespace that allocates on ``device``."""
    return require_gpu() if check_device(device) == "gpu" else np


def to_numpy(x: Any) -> np.ndarray:
    """A NumPy array with the same values: the only way out of the GPU."""
    if _is_cupy_array(x):
        return x.get()
    return np.asarray(x)


def to_device(x: Any, device: str) -> Any:
    """Copy ``x`` to 'cpu' (NumPy) or 'gpu' (CuPy); no copy when it is already there."""
    if check_device(device) == "cpu":
        return to_numpy(x)
    cupy = require_gpu()
    return cupy.asarray(x)


def synchronize() -> None:
    """Wait for queued GPU work, so a timer measures the work and not just its launch."""
    if gpu_status()[0]:
        cupy = require_gpu()
        cupy.cuda.get_current_stream().synchronize()


def scatter_add(xp: ModuleType, target: Any, index: Any, values: Any) -> None:
    """target[index] += values, adding repeated indices once each (NumPy's ufunc.at)."""
    if xp is np:
        np.add.at(target, index, values)
    else:
        import cupyx  # only reached with CuPy arrays

        cupyx.scatter_add(target, index, values)


def ones_like(xp: ModuleType, array: Any) -> Any:
    """Ones of ``array``'s shape and dtype: d(y)/d(y), the seed of every backward pass.

    ``xp.array(1)`` for the usual 0-d loss costs a quarter of ``xp.ones(())``.
    """
    if array.shape == ():
        return xp.array(1, dtype=array.dtype)
    return xp.ones(array.shape, dtype=array.dtype)


_CONSTANTS: dict[tuple[Any, ...], Any] = {}


def constant(xp: ModuleType, value: float, dtype: Any) -> Any:
    """A shared, read-only 0-d array holding ``value`` in ``dtype``.

    Ufuncs convert a Python number on every call (~0.25 µs on a small array, as much as the
    arithmetic itself); the hot paths (ReLU's zero, mean's and maximum's constants) reuse one
    array instead. The result is the same: NumPy casts the number to ``dtype`` either way.
    """
    key = (xp, value.__class__, value, dtype)  # the class too: 1 and 1.0 hash alike
    try:
        return _CONSTANTS[key]
    except KeyError:
        pass
    if len(_CONSTANTS) >= 1024:
        _CONSTANTS.clear()
    array = xp.asarray(value, dtype=dtype)
    if xp is np:
        array.flags.writeable = False
    _CONSTANTS[key] = array
    return array
