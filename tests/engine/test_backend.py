"""edu_dl.backend: the array namespace, devices, and the errors around the GPU.

No CuPy array can be made without a GPU, so the CuPy paths are driven by a fake array whose type
says it comes from the ``cupy`` module (what ``backend._is_cupy_array`` looks at), and by
monkeypatching ``gpu_status`` / ``require_gpu``. The real GPU cases skip where there is none.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types

import numpy as np
import pytest

import edu_dl as ed
from edu_dl import backend

GPU = pytest.mark.skipif(not ed.gpu_status()[0], reason="no CUDA GPU / CuPy here")
DEVICES = ["cpu", pytest.param("gpu", marks=[GPU, pytest.mark.gpu])]

FakeCupyArray = type("ndarray", (), {"__module__": "cupy._core.core"})


@pytest.fixture
def fresh_gpu_status():
    """gpu_status() is cached: clear it before and after a test that fakes CuPy."""
    backend.gpu_status.cache_clear()
    yield
    backend.gpu_status.cache_clear()


@pytest.fixture
def fake_cupy(monkeypatch):
    """A stand-in CuPy module, returned wherever the backend asks for the GPU namespace."""
    module = types.ModuleType("cupy")
    monkeypatch.setattr(backend, "require_gpu", lambda: module)
    return module


@pytest.fixture
def no_gpu(monkeypatch):
    """Behave as on a machine without a GPU, even where there is one."""
    monkeypatch.setattr(backend, "gpu_status", lambda: (False, "CuPy is not installed"))


# --------------------------------------------------------------------------- get_xp


def test_get_xp_numpy_arrays_and_scalars():
    assert backend.get_xp(np.ones(3)) is np
    assert backend.get_xp(np.ones(3), np.zeros((2, 2))) is np
    assert backend.get_xp(np.float32(1.0)) is np
    assert backend.get_xp(1, 2.5, True, 1j) is np
    assert backend.get_xp() is np
    assert ed.get_xp is backend.get_xp


def test_get_xp_rejects_what_is_not_an_array():
    with pytest.raises(TypeError, match="list"):
        backend.get_xp([1, 2])
    with pytest.raises(TypeError, match="str"):
        backend.get_xp(np.ones(2), "x")


def test_get_xp_cupy_array_gives_cupy(fake_cupy):
    a = FakeCupyArray()
    assert backend.get_xp(a) is fake_cupy
    assert backend.get_xp(a, 2.0, a) is fake_cupy
    assert backend.device_of(a) == "gpu"
    assert backend.device_of(np.ones(1)) == "cpu"


@pytest.mark.parametrize("order", ["numpy_first", "cupy_first"])
def test_mixing_numpy_and_cupy_is_a_type_error(fake_cupy, order):
    arrays = [np.ones(2), FakeCupyArray()]
    if order == "cupy_first":
        arrays.reverse()
    with pytest.raises(TypeError, match=r"different devices.*to_device\(x, 'cpu'\)"):
        backend.get_xp(*arrays)


def test_cupy_array_without_usable_gpu_is_a_device_error(no_gpu):
    with pytest.raises(backend.DeviceError, match="device='cpu'"):
        backend.get_xp(FakeCupyArray())


# --------------------------------------------------------------------------- gpu_status (CuPy)


def test_the_gpu_is_probed_once_however_often_it_is_asked(monkeypatch, fresh_gpu_status):
    """Notebooks ask gpu_status() in many cells and CUDA's first query is slow: one probe,
    one answer."""
    probes = []
    cupy = _cupy_with_device_count(lambda: probes.append(1) or 2)
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    assert [backend.gpu_status() for _ in range(3)] == [(True, "2 CUDA device(s)")] * 3
    assert len(probes) == 1


def test_gpu_status_false_without_cupy(monkeypatch, fresh_gpu_status):
    monkeypatch.setitem(sys.modules, "cupy", None)  # makes `import cupy` raise ImportError
    assert backend.gpu_status()[0] is False
    assert backend.gpu_status() == (False, "CuPy is not installed")


def test_gpu_status_false_when_importing_cupy_raises(monkeypatch, fresh_gpu_status):
    real_import = importlib.import_module

    def broken_import(name, *args, **kwargs):
        if name == "cupy":
            raise OSError("libcudart.so.12: cannot open shared object file")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(backend.importlib, "import_module", broken_import)
    assert backend.gpu_status()[0] is False


def _cupy_with_device_count(count_fn):
    cupy = types.ModuleType("cupy")
    cupy.cuda = types.SimpleNamespace(runtime=types.SimpleNamespace(getDeviceCount=count_fn))
    return cupy


def test_gpu_status_false_when_cuda_has_no_driver(monkeypatch, fresh_gpu_status):
    class CUDARuntimeError(RuntimeError):
        pass

    def no_driver():
        raise CUDARuntimeError("cudaErrorInsufficientDriver")

    monkeypatch.setitem(sys.modules, "cupy", _cupy_with_device_count(no_driver))
    assert backend.gpu_status()[0] is False
    usable, reason = backend.gpu_status()
    assert not usable and "CUDARuntimeError" in reason
    with pytest.raises(backend.DeviceError, match=r"CUDARuntimeError.*device='cpu'"):
        backend.require_gpu()


def test_gpu_status_false_with_zero_devices(monkeypatch, fresh_gpu_status):
    monkeypatch.setitem(sys.modules, "cupy", _cupy_with_device_count(lambda: 0))
    assert backend.gpu_status()[0] is False
    assert backend.gpu_status() == (False, "CuPy found no CUDA device")


def test_gpu_status_true_with_a_device(monkeypatch, fresh_gpu_status):
    cupy = _cupy_with_device_count(lambda: 2)
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    assert backend.gpu_status()[0] is True
    assert backend.require_gpu() is cupy


def test_gpu_status_never_raises(monkeypatch):
    def broken():
        raise RuntimeError("anything at all")

    monkeypatch.setitem(backend._STATUS, "cupy", broken)
    backend.gpu_status.cache_clear()
    try:
        assert backend.gpu_status() == (
            False, "cupy could not be checked (RuntimeError: anything at all)")
    finally:
        backend.gpu_status.cache_clear()


# --------------------------------------------------------------------------- each framework's GPU


def _without(monkeypatch, name):
    """Importing ``name`` fails as if it were not installed."""
    monkeypatch.setitem(sys.modules, name, None)  # import raises ImportError
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(backend.importlib.util, "find_spec",
                        lambda n, *a: None if n == name else real_find_spec(n, *a))


def _fake_torch(count):
    torch = types.ModuleType("torch")
    torch.__version__ = "2.13.0+cpu" if count == 0 else "2.13.0+cu128"
    torch.cuda = types.SimpleNamespace(is_available=lambda: count > 0, device_count=lambda: count)
    return torch


def _fake_tensorflow(gpus):
    tf = types.ModuleType("tensorflow")
    tf.__version__ = "2.18.0"
    tf.config = types.SimpleNamespace(list_physical_devices=lambda kind: list(gpus))
    return tf


@pytest.mark.parametrize(("framework", "reason"), [
    ("cupy", "CuPy is not installed"), ("torch", "PyTorch is not installed"),
    ("tensorflow", "TensorFlow is not installed"), ("numba", "Numba is not installed"),
])
def test_gpu_status_of_a_missing_framework_says_so(monkeypatch, fresh_gpu_status, framework,
                                                   reason):
    _without(monkeypatch, framework)
    assert backend.gpu_status(framework) == (False, reason)
    with pytest.raises(backend.DeviceError, match=f"No GPU is available: {reason}\\. Run on"):
        backend.require_gpu_for(framework)


def test_gpu_status_of_torch_and_tensorflow_without_and_with_a_gpu(monkeypatch, fresh_gpu_status):
    monkeypatch.setitem(sys.modules, "torch", _fake_torch(0))
    monkeypatch.setitem(sys.modules, "tensorflow", _fake_tensorflow([]))
    # the sentences the lectures print on a CPU machine
    assert backend.gpu_status("torch") == (False, "PyTorch 2.13.0+cpu sees no CUDA device")
    assert backend.gpu_status("tensorflow") == (False, "TensorFlow 2.18.0 sees no GPU")
    backend.gpu_status.cache_clear()
    monkeypatch.setitem(sys.modules, "torch", _fake_torch(2))
    monkeypatch.setitem(sys.modules, "tensorflow", _fake_tensorflow(["GPU:0"]))
    assert backend.gpu_status("torch") == (True, "2 CUDA device(s) visible to PyTorch")
    assert backend.gpu_status("tensorflow") == (True, "1 GPU(s) visible to TensorFlow")
    backend.require_gpu_for("torch")  # no error


def test_gpu_status_of_numba_asks_the_driver_not_numba_cuda(monkeypatch, fresh_gpu_status):
    monkeypatch.setattr(backend, "driver_device_count", lambda: None)
    usable, reason = backend.gpu_status("numba")
    assert not usable and reason == "Numba finds no CUDA device (no NVIDIA driver reports one)"
    backend.gpu_status.cache_clear()
    monkeypatch.setattr(backend, "driver_device_count", lambda: 1)
    assert backend.gpu_status("numba") == (True, "1 CUDA device(s) reported by the driver")


def test_gpu_status_is_asked_once_per_framework_and_never_raises(monkeypatch, fresh_gpu_status):
    torch = _fake_torch(0)
    calls = []

    def broken():
        calls.append(1)
        raise RuntimeError("driver exploded")

    torch.cuda.is_available = broken
    monkeypatch.setitem(sys.modules, "torch", torch)
    first = backend.gpu_status("torch")
    assert first == (False, "torch could not be checked (RuntimeError: driver exploded)")
    assert backend.gpu_status("torch") == first and calls == [1]  # cached


def test_gpu_status_of_an_unknown_framework_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown framework 'jax'; choose from cupy, torch"):
        backend.gpu_status("jax")


def test_driver_device_count_is_none_or_a_count():
    count = backend.driver_device_count()
    assert count is None or (isinstance(count, int) and count >= 0)


# --------------------------------------------------------------------------- choosing a device


@pytest.mark.parametrize(
    "call",
    [
        lambda: backend.require_gpu(),
        lambda: backend.check_device("gpu"),
        lambda: backend.xp_for("gpu"),
        lambda: backend.to_device(np.ones(2), "gpu"),
        lambda: ed.tensor([1.0], device="gpu"),
    ],
    ids=["require_gpu", "check_device", "xp_for", "to_device", "tensor"],
)
def test_gpu_without_one_says_how_to_run_on_cpu(no_gpu, call):
    with pytest.raises(backend.DeviceError) as info:
        call()
    message = str(info.value)
    assert "No GPU is available" in message
    assert "CuPy is not installed" in message  # the reason
    assert "device='cpu'" in message and "make lab GPU=1" in message  # the way out
    assert isinstance(info.value, RuntimeError)


@pytest.mark.parametrize("name", ["cuda", "GPU", "tpu", ""])
def test_unknown_device_is_a_value_error(name):
    with pytest.raises(ValueError, match="unknown device"):
        backend.check_device(name)
    with pytest.raises(ValueError, match="unknown device"):
        backend.to_device(np.ones(2), name)
    with pytest.raises(ValueError, match="unknown device"):
        ed.tensor([1.0], device=name)


def test_cpu_is_always_fine():
    assert backend.check_device("cpu") == "cpu"
    assert backend.xp_for("cpu") is np


# --------------------------------------------------------------------------- conversions


def test_to_numpy_and_to_device_cpu_round_trip():
    x = np.arange(6.0).reshape(2, 3)
    assert backend.to_numpy(x) is x  # already on the CPU: no copy
    back = backend.to_numpy(backend.to_device(x, "cpu"))
    assert isinstance(back, np.ndarray)
    np.testing.assert_array_equal(back, x)
    np.testing.assert_array_equal(backend.to_numpy([1, 2]), [1, 2])
    assert backend.to_numpy(3.0) == 3.0


def test_to_numpy_uses_get_for_cupy_arrays():
    class Fake(FakeCupyArray):
        __module__ = "cupy"

        def get(self):
            return np.array([1.0, 2.0])

    np.testing.assert_array_equal(backend.to_numpy(Fake()), [1.0, 2.0])


@pytest.mark.parametrize("device", DEVICES)
def test_to_device_round_trip(device):
    x = np.arange(6.0, dtype=np.float32).reshape(2, 3)
    y = backend.to_device(x, device)
    assert backend.device_of(y) == device
    back = backend.to_numpy(y)
    assert isinstance(back, np.ndarray) and back.dtype == np.float32
    np.testing.assert_array_equal(back, x)


def test_synchronize_is_a_noop_without_gpu(monkeypatch):
    monkeypatch.setattr(backend, "gpu_status", lambda framework="cupy": (False, "faked"))

    def must_not_be_called():
        raise AssertionError("synchronize touched the GPU")

    monkeypatch.setattr(backend, "require_gpu", must_not_be_called)
    assert backend.synchronize() is None


@pytest.mark.parametrize("device", DEVICES)
def test_synchronize_returns(device):
    ed.tensor(np.ones(3), device=device).sum()
    assert ed.synchronize() is None


@pytest.mark.parametrize("device", DEVICES)
def test_scatter_add_adds_repeated_indices(device):
    xp = backend.xp_for(device)
    target = xp.zeros(4)
    backend.scatter_add(xp, target, xp.asarray([0, 0, 2, 0]), xp.asarray([1.0, 2.0, 3.0, 4.0]))
    np.testing.assert_array_equal(backend.to_numpy(target), [7.0, 0.0, 3.0, 0.0])
    grid = xp.zeros((2, 3))
    rows, cols = xp.asarray([1, 1, 0]), xp.asarray([2, 2, 0])
    backend.scatter_add(xp, grid, (rows, cols), xp.asarray([1.0, 1.0, 5.0]))
    np.testing.assert_array_equal(backend.to_numpy(grid), [[5.0, 0, 0], [0, 0, 2.0]])


@pytest.mark.usefixtures("numpy_as_cupy")
@pytest.mark.parametrize("gpu_case", [test_to_device_round_trip, test_synchronize_returns,
                                      test_scatter_add_adds_repeated_indices],
                         ids=lambda case: case.__name__)
def test_the_gpu_cases_on_numpy_as_cupy(gpu_case):
    """The [gpu] cases above where CI has no GPU: NumPy stands in for CuPy, so their path
    (to_device, to_numpy's .get(), the stream's synchronize, cupyx.scatter_add) runs."""
    gpu_case("gpu")


@GPU
@pytest.mark.gpu
def test_real_cupy_arrays():
    cupy = backend.require_gpu()
    a = cupy.ones(3)
    assert backend.get_xp(a) is cupy
    assert backend.device_of(a) == "gpu"
    with pytest.raises(TypeError, match="different devices"):
        backend.get_xp(a, np.ones(3))
    with pytest.raises(TypeError, match="different devices"):
        ed.tensor(np.ones(3)) + ed.tensor(np.ones(3), device="gpu")


def test_constant_is_a_shared_read_only_0d_array_of_the_dtype() -> None:
    c = backend.constant(np, 0.5, np.dtype(np.float32))
    assert c.shape == () and c.dtype == np.float32 and float(c) == 0.5
    assert backend.constant(np, 0.5, np.dtype(np.float32)) is c  # cached
    with pytest.raises(ValueError):
        c[()] = 1.0  # read-only: nobody can change everyone's 0.5
    # 1, 1.0 and True hash alike, but they are different constants; so are dtypes.
    assert backend.constant(np, 1, np.dtype(np.int64)).dtype == np.int64
    assert backend.constant(np, 1.0, np.dtype(np.float64)).dtype == np.float64
    assert backend.constant(np, True, np.dtype(np.bool_)).dtype == np.bool_
    assert backend.constant(np, 0.5, np.dtype(np.float64)) is not c
