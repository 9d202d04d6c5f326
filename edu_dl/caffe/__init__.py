"""Caffe, the declarative way: train a network described in a .prototxt file, with no code.

``edu_dl.caffe.train("net.prototxt", "solver.prototxt")`` (or ``edu-dl train``) reads Caffe's
own text format with protobuf's parser against a subset of Caffe's schema (``caffe_subset.proto``:
BVLC Caffe's field names and numbers), builds the TRAIN net on edu_dl's eager engine and runs
Caffe's solver. The subset: layers HDF5Data (HDF5 or NPZ source), Convolution, Pooling (MAX),
InnerProduct, ReLU, EuclideanLoss, SoftmaxWithLoss; solvers SGD (momentum) and Adam. Anything
else is an error that names the file and the line.

The names below are imported on first use (PEP 562): the schema's generated code
(``caffe_subset_pb2.py``) needs protobuf PROTOBUF_NEEDED or newer, which TensorFlow before 2.20
does not accept. Where an older protobuf is installed (a hosted service's TensorFlow), ``edu-dl``
and the rest of edu_dl work as ever, and the first use of the reader says in one sentence what it
needs, instead of protobuf's traceback.
"""

from __future__ import annotations

import importlib
import re
from typing import TYPE_CHECKING, Any

# "Protobuf Python Version" in caffe_subset_pb2.py's header: the runtime it was generated for.
PROTOBUF_NEEDED = (7, 35, 1)

# name -> the submodule that defines it.
_EXPORTS = {
    "LENET_NET": "examples", "LENET_SOLVER": "examples", "TWO_LAYER_NET": "examples",
    "TWO_LAYER_SOLVER": "examples",
    "LAYER_TYPES": "net", "Net": "net",
    "CaffeFormatError": "prototxt", "filter_net": "prototxt", "read_net": "prototxt",
    "read_solver": "prototxt",
    "SOLVER_TYPES": "solver", "History": "solver", "Solver": "solver", "build": "solver",
    "learning_rate": "solver", "train": "solver",
}
# Submodules reached as attributes (`caffe.examples.TWO_LAYER_DATA`, `from edu_dl.caffe import
# caffe_subset_pb2`); those two and `cli` import no generated code.
_SUBMODULES = {"caffe_subset_pb2", "cli", "examples", "net", "prototxt", "solver"}
_NO_PROTOBUF = {"cli", "examples"}

if TYPE_CHECKING:
    from edu_dl.caffe.examples import LENET_NET, LENET_SOLVER, TWO_LAYER_NET, TWO_LAYER_SOLVER
    from edu_dl.caffe.net import LAYER_TYPES, Net
    from edu_dl.caffe.prototxt import CaffeFormatError, filter_net, read_net, read_solver
    from edu_dl.caffe.solver import SOLVER_TYPES, History, Solver, build, learning_rate, train

__all__ = [  # the keys of _EXPORTS (a test keeps them equal)
    "LAYER_TYPES",
    "LENET_NET",
    "LENET_SOLVER",
    "SOLVER_TYPES",
    "TWO_LAYER_NET",
    "TWO_LAYER_SOLVER",
    "CaffeFormatError",
    "History",
    "Net",
    "Solver",
    "build",
    "filter_net",
    "learning_rate",
    "read_net",
    "read_solver",
    "train",
]


class ProtobufTooOld(ImportError):
    """protobuf is missing, or older than the runtime caffe_subset_pb2.py was generated for."""


def _release(version: str) -> tuple[int, ...]:
    """'5.29.4' -> (5, 29, 4); '7.36.0rc1' -> (7, 36, 0)."""
    return tuple(int(m) for m in re.findall(r"\d+", version.split("+")[0])[:3])


def require_protobuf(installed: str | None = None) -> None:
    """Raise ProtobufTooOld, saying what to do, unless protobuf PROTOBUF_NEEDED or newer is
    installed (``installed``: a version to judge instead of the imported protobuf's)."""
    if installed is None:
        try:
            from google.protobuf import __version__ as imported
        except ImportError:
            imported = None
        installed = imported
    if installed is not None and _release(installed) >= PROTOBUF_NEEDED:
        return
    needed = ".".join(map(str, PROTOBUF_NEEDED))
    have = f"this Python has protobuf {installed}" if installed else "protobuf is not installed"
    raise ProtobufTooOld(
        f"edu_dl.caffe reads .prototxt files with code generated for protobuf {needed} or newer, "
        f"and {have}: run `pip install 'protobuf>={needed}'` and restart the kernel (a TensorFlow "
        "older than 2.20 does not accept it: upgrade TensorFlow as well, or skip the Caffe cells)")


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name, name if name in _SUBMODULES else None)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if module not in _NO_PROTOBUF:
        require_protobuf()
    loaded = importlib.import_module(f".{module}", __name__)
    value = loaded if name in _SUBMODULES else getattr(loaded, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS, *_SUBMODULES})
