"""Caffe, the declarative way: train a network described in a .prototxt file, with no code.

``edu_dl.caffe.train("net.prototxt", "solver.prototxt")`` (or ``edu-dl train``) reads Caffe's
own text format with protobuf's parser against a subset of Caffe's schema (``caffe_subset.proto``:
BVLC Caffe's field names and numbers), builds the TRAIN net on edu_dl's eager engine and runs
Caffe's solver. The subset: layers HDF5Data (HDF5 or NPZ source), Convolution, Pooling (MAX),
InnerProduct, ReLU, EuclideanLoss, SoftmaxWithLoss; solvers SGD (momentum) and Adam. Anything
else is an error that names the file and the line.
"""

from .examples import LENET_NET, LENET_SOLVER, TWO_LAYER_NET, TWO_LAYER_SOLVER
from .net import LAYER_TYPES, Net
from .prototxt import CaffeFormatError, filter_net, read_net, read_solver
from .solver import SOLVER_TYPES, History, Solver, build, learning_rate, train

__all__ = [
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
