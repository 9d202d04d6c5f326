"""A Caffe net on edu_dl's eager engine: layers run in the order written, wired by blob names.

Supported layer types (Caffe's semantics, Caffe's parameter names):

- ``HDF5Data``: ``hdf5_data_param { source batch_size shuffle }``. ``source`` is, as in Caffe,
  a text file listing one HDF5 file per line, or (edu_dl's shortcut) a single ``.h5``/``.hdf5``
  file or a NumPy ``.npz`` file. Each top blob reads the dataset (or NPZ array) of its own name;
  rows are served ``batch_size`` at a time, in order, wrapping around at the end.
- ``InnerProduct``: ``y = x W^T + b`` with W of Caffe's shape (num_output, K) (``transpose: true``
  stores it (K, num_output)); fillers constant, uniform, gaussian, xavier, msra.
- ``Convolution``: ``ops.conv2d`` of an (N, C, H, W) bottom with a weight (num_output, C, kh,
  kw) and a bias (num_output,); ``kernel_size``/``pad``/``stride`` (one value, or h and w) or
  their ``_h``/``_w`` forms, as Caffe. Only ``group: 1``.
- ``Pooling``: ``pool: MAX`` only, with Caffe's output size (rounded up: ``ceil_mode``) and
  stride 1 unless given; ``global_pooling`` pools the whole image.
- ``ReLU``: ``y = max(x, 0) + negative_slope * min(x, 0)``; in place when bottom == top.
- ``EuclideanLoss``: ``sum((a - b)^2) / (2N)`` with N the batch size.
- ``SoftmaxWithLoss``: cross-entropy of softmax(logits) with integer labels, normalized as
  ``loss_param { normalization ignore_label }`` says (default VALID).

Relative paths are looked up next to the file that names them (the .prototxt, or the list
file) first, then in the working directory (Caffe's only place).
Parameters are named ``<layer>/<i>`` as in Caffe's blobs (0: weight, 1: bias).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from edu_dl import backend
from edu_dl.autograd import ops
from edu_dl.autograd.tensor import Tensor
from edu_dl.caffe import caffe_subset_pb2 as pb
from edu_dl.caffe.prototxt import CaffeFormatError, LayerSource

DATA_TYPES = ("HDF5Data",)
LOSS_TYPES = ("EuclideanLoss", "SoftmaxWithLoss")
LAYER_TYPES = (*DATA_TYPES, "Convolution", "Pooling", "InnerProduct", "ReLU", *LOSS_TYPES)


@dataclass
class Param:
    """A learnable blob and its multipliers from ``param { lr_mult decay_mult }``."""

    name: str
    tensor: Tensor
    lr_mult: float = 1.0
    decay_mult: float = 1.0


def resolve(path_text: str, base: Path, what: str) -> Path:
    """``path_text`` next to ``base`` (a file's folder), else in the working directory."""
    path = Path(path_text)
    tried = [path] if path.is_absolute() else [base / path, path]
    for candidate in tried:
        if candidate.is_file():
            return candidate
    raise FileNotFoundError(f"{what}: no such file {path_text!r} (looked for "
                            f"{', '.join(str(t) for t in tried)})")


def _load_arrays(path: Path, names: list[str], where: str) -> dict[str, np.ndarray]:
    """The arrays ``names`` from one .npz or HDF5 file."""
    if path.suffix == ".npz":
        with np.load(path) as npz:
            missing = [n for n in names if n not in npz.files]
            found = ", ".join(npz.files)
            arrays = {n: np.asarray(npz[n]) for n in names if n in npz.files}
    elif path.suffix in (".h5", ".hdf5"):
        try:
            import h5py
        except ImportError:
            raise CaffeFormatError(f"{where}: reading {path} needs h5py (pip install h5py); "
                                   f"or save the data as .npz") from None
        with h5py.File(path, "r") as h5:
            missing = [n for n in names if n not in h5]
            found = ", ".join(h5.keys())
            arrays = {n: np.asarray(h5[n]) for n in names if n in h5}
    else:
        raise CaffeFormatError(f"{where}: {path} is neither .h5/.hdf5 nor .npz")
    if missing:
        raise CaffeFormatError(f"{where}: {path} has no dataset {', '.join(map(repr, missing))} "
                               f"for the top blob(s) (it has: {found or 'nothing'})")
    return arrays


class DataLayer:
    """Caffe's HDF5Data layer: whole dataset on the device, served in batches of ``batch_size``."""

    def __init__(self, layer: pb.LayerParameter, where: str, base: Path, dtype: Any,
                 device: str, rng: np.random.Generator) -> None:
        param = layer.hdf5_data_param
        if not param.source:
            raise CaffeFormatError(f"{where}: HDF5Data needs hdf5_data_param {{ source: ... }}")
        if not param.batch_size:
            raise CaffeFormatError(f"{where}: HDF5Data needs hdf5_data_param {{ batch_size: N }}")
        if not layer.top:
            raise CaffeFormatError(f"{where}: HDF5Data needs at least one top blob")
        source = resolve(param.source, base, f"{where}: hdf5_data_param.source")
        if source.suffix in (".npz", ".h5", ".hdf5"):
            files = [source]
        else:  # Caffe's way: a text file listing the data files, one per line
            lines = source.read_text(encoding="utf-8").splitlines()
            names = [line.strip() for line in lines if line.strip()]
            files = [resolve(n, source.parent, f"{where}: listed in {source}") for n in names]
            if not files:
                raise CaffeFormatError(f"{where}: {source} lists no data files")
        parts = [_load_arrays(f, list(layer.top), where) for f in files]
        arrays = {top: np.concatenate([p[top] for p in parts]) for top in layer.top}
        rows = {top: a.shape[0] if a.ndim else 0 for top, a in arrays.items()}
        if len(set(rows.values())) != 1 or 0 in rows.values():
            raise CaffeFormatError(f"{where}: the top blobs need the same, nonzero number of "
                                   f"rows, got {rows}")
        self.num_rows = next(iter(rows.values()))
        self.batch_size, self.shuffle, self.rng = int(param.batch_size), param.shuffle, rng
        self.tops = list(layer.top)
        self.arrays = {top: backend.to_device(a.astype(dtype), device) for top, a in arrays.items()}
        self.order = np.arange(self.num_rows)
        self.cursor = 0

    def shapes(self) -> dict[str, tuple[int, ...]]:
        return {t: (self.batch_size, *a.shape[1:]) for t, a in self.arrays.items()}

    def next_batch(self) -> dict[str, Tensor]:
        """The next ``batch_size`` rows (wrapping around; reshuffled per pass if ``shuffle``)."""
        if self.shuffle and self.cursor == 0:
            self.rng.shuffle(self.order)
        index = self.order[(self.cursor + np.arange(self.batch_size)) % self.num_rows]
        self.cursor = (self.cursor + self.batch_size) % self.num_rows
        xp = backend.get_xp(next(iter(self.arrays.values())))
        idx = xp.asarray(index)
        return {t: Tensor(a[idx]) for t, a in self.arrays.items()}


# --------------------------------------------------------------------------- fillers


def fill(filler: pb.FillerParameter, shape: tuple[int, ...], rng: np.random.Generator,
         where: str) -> np.ndarray:
    """Caffe's fillers (filler.hpp); float64 values, cast by the caller."""
    count = math.prod(shape)
    fan_in = count // shape[0]
    fan_out = count // shape[1] if len(shape) > 1 else count
    n = {pb.FillerParameter.FAN_IN: fan_in, pb.FillerParameter.FAN_OUT: fan_out,
         pb.FillerParameter.AVERAGE: (fan_in + fan_out) / 2}[filler.variance_norm]
    kind = filler.type
    if kind == "constant":
        return np.full(shape, filler.value)
    if kind == "uniform":
        return rng.uniform(filler.min, filler.max, shape)
    if kind == "gaussian":
        if filler.sparse != -1:
            raise CaffeFormatError(f"{where}: gaussian filler with sparse is not supported")
        return rng.normal(filler.mean, filler.std, shape)
    if kind == "xavier":  # uniform in +-sqrt(3 / n): variance 1 / n
        scale = math.sqrt(3.0 / n)
        return rng.uniform(-scale, scale, shape)
    if kind == "msra":  # gaussian with variance 2 / n (He et al.)
        return rng.normal(0.0, math.sqrt(2.0 / n), shape)
    raise CaffeFormatError(f"{where}: unknown filler type {kind!r} (supported: constant, "
                           f"uniform, gaussian, xavier, msra)")


# --------------------------------------------------------------------------- layers

Forward = Callable[[list[Tensor]], list[Tensor]]


def _inner_product(layer: pb.LayerParameter, shapes: list[tuple[int, ...]], where: str,
                   make: Callable[[str, tuple[int, ...], pb.FillerParameter], Tensor]
                   ) -> tuple[Forward, list[tuple[int, ...]]]:
    param = layer.inner_product_param
    if not param.num_output:
        raise CaffeFormatError(f"{where}: InnerProduct needs inner_product_param "
                               f"{{ num_output: N }}")
    (shape,) = shapes
    axis = param.axis if param.axis >= 0 else param.axis + len(shape)
    if not 0 <= axis < len(shape):
        raise CaffeFormatError(f"{where}: InnerProduct axis {param.axis} does not fit the "
                               f"bottom shape {shape}")
    k, out = math.prod(shape[axis:]), int(param.num_output)
    w_shape = (k, out) if param.transpose else (out, k)
    weight = make("0", w_shape, param.weight_filler)
    bias = make("1", (out,), param.bias_filler) if param.bias_term else None

    def forward(bottoms: list[Tensor]) -> list[Tensor]:
        (x,) = bottoms
        lead = x.shape[:axis]
        x2 = x.reshape(math.prod(lead), k)
        y = x2 @ weight if param.transpose else x2 @ weight.T
        if bias is not None:
            y = y + bias
        return [y.reshape(*lead, out)]

    return forward, [(*shape[:axis], out)]


Pair = tuple[int, int]
_PARAM_FIELDS = {"ConvolutionParameter": "convolution_param", "PoolingParameter": "pooling_param"}


def _hw(param: Any, name: str, where: str, default: int | None) -> Pair:
    """A 2-D size given Caffe's two ways: ``name`` (one value for both axes, or one per axis),
    or the pair ``pad_h``/``pad_w`` (``kernel_h``/``kernel_w`` for ``kernel_size``); ``default``
    when neither is given (None: required)."""
    value = getattr(param, name)
    if isinstance(value, int):  # PoolingParameter's fields are single values
        given = [value] if param.HasField(name) else []
    else:  # ConvolutionParameter's are repeated
        given = list(value)
    field = _PARAM_FIELDS[type(param).__name__]
    h, w = (f"{name.removesuffix('_size')}_{axis}" for axis in "hw")
    if param.HasField(h) or param.HasField(w):
        if given:
            raise CaffeFormatError(f"{where}: {field}: give {name} or {h} and {w}, not both")
        return getattr(param, h), getattr(param, w)
    if len(given) > 2:
        raise CaffeFormatError(f"{where}: {field}.{name} has {len(given)} values; a 2-D layer "
                               f"takes one, or two (height and width)")
    if not given:
        if default is None:
            raise CaffeFormatError(f"{where}: {field} needs {name} (or {h} and {w})")
        return default, default
    return (given[0], given[0]) if len(given) == 1 else (given[0], given[1])


def _positive(pair: Pair, name: str, field: str, where: str) -> Pair:
    if min(pair) < 1:
        raise CaffeFormatError(f"{where}: {field}.{name} must be positive, got {pair}")
    return pair


def _top_shape(run: Callable[[Tensor], Tensor], shape: tuple[int, ...], where: str
               ) -> tuple[int, ...]:
    """The layer's top shape, found by running it on one zero image; the op's own message
    explains a geometry that does not fit."""
    if len(shape) != 4:
        raise CaffeFormatError(f"{where}: needs a bottom of shape (N, C, H, W), got {shape}")
    try:
        top = run(Tensor(np.zeros((1, *shape[1:]))))
    except ValueError as exc:
        raise CaffeFormatError(f"{where}: {exc}") from None
    return (shape[0], *top.shape[1:])


def _convolution(layer: pb.LayerParameter, shapes: list[tuple[int, ...]], where: str,
                 make: Callable[[str, tuple[int, ...], pb.FillerParameter], Tensor]
                 ) -> tuple[Forward, list[tuple[int, ...]]]:
    param, field = layer.convolution_param, "convolution_param"
    if not param.num_output:
        raise CaffeFormatError(f"{where}: Convolution needs {field} {{ num_output: N }}")
    if param.group != 1:
        raise CaffeFormatError(f"{where}: {field}.group: {param.group} (grouped convolution) is "
                               f"not supported; edu_dl supports group: 1")
    kernel = _positive(_hw(param, "kernel_size", where, None), "kernel_size", field, where)
    stride = _positive(_hw(param, "stride", where, 1), "stride", field, where)
    pad = _hw(param, "pad", where, 0)
    (shape,) = shapes
    out, channels = int(param.num_output), shape[1] if len(shape) > 1 else 0
    w_shape = (out, channels, *kernel)
    top = _top_shape(lambda x: ops.conv2d(x, Tensor(np.zeros(w_shape)), stride=stride,
                                          padding=pad), shape, where)
    weight = make("0", w_shape, param.weight_filler)
    bias = make("1", (out,), param.bias_filler) if param.bias_term else None

    def forward(bottoms: list[Tensor]) -> list[Tensor]:
        return [ops.conv2d(bottoms[0], weight, bias, stride=stride, padding=pad)]

    return forward, [top]


def _pooling(layer: pb.LayerParameter, shapes: list[tuple[int, ...]], where: str
             ) -> tuple[Forward, list[tuple[int, ...]]]:
    param, field = layer.pooling_param, "pooling_param"
    if param.pool != pb.PoolingParameter.MAX:
        name = pb.PoolingParameter.PoolMethod.Name(param.pool)
        raise CaffeFormatError(f"{where}: {field}.pool: {name} is not supported; edu_dl "
                               f"supports pool: MAX")
    (shape,) = shapes
    if param.global_pooling:
        if any(param.HasField(f) for f in ("kernel_size", "kernel_h", "kernel_w")):
            raise CaffeFormatError(f"{where}: {field}: global_pooling takes the whole image; "
                                   f"give no kernel size")
        kernel = (shape[2], shape[3]) if len(shape) == 4 else (1, 1)
    else:
        kernel = _positive(_hw(param, "kernel_size", where, None), "kernel_size", field, where)
    stride = _positive(_hw(param, "stride", where, 1), "stride", field, where)
    pad = _hw(param, "pad", where, 0)
    if param.global_pooling and (stride != (1, 1) or pad != (0, 0)):
        raise CaffeFormatError(f"{where}: {field}: global_pooling needs stride 1 and pad 0")

    def forward(bottoms: list[Tensor]) -> list[Tensor]:
        # Caffe rounds the number of windows up: PyTorch's ceil_mode.
        return [ops.max_pool2d(bottoms[0], kernel, stride, pad, ceil_mode=True)]

    return forward, [_top_shape(lambda x: forward([x])[0], shape, where)]


def _relu(layer: pb.LayerParameter, shapes: list[tuple[int, ...]]
          ) -> tuple[Forward, list[tuple[int, ...]]]:
    slope = layer.relu_param.negative_slope

    def forward(bottoms: list[Tensor]) -> list[Tensor]:
        (x,) = bottoms
        y = ops.relu(x)
        return [y if not slope else y - slope * ops.relu(-x)]

    return forward, shapes


def _euclidean(shapes: list[tuple[int, ...]], where: str
               ) -> tuple[Forward, list[tuple[int, ...]]]:
    a, b = shapes
    if math.prod(a) != math.prod(b) or a[:1] != b[:1]:
        raise CaffeFormatError(f"{where}: EuclideanLoss needs two bottoms of equal size, got "
                               f"shapes {a} and {b}")

    def forward(bottoms: list[Tensor]) -> list[Tensor]:
        y_hat, y = bottoms
        diff = y_hat - y.reshape(*y_hat.shape)
        return [(diff * diff).sum() / (2 * y_hat.shape[0])]

    return forward, [()]


def _softmax_loss(layer: pb.LayerParameter, shapes: list[tuple[int, ...]], where: str
                  ) -> tuple[Forward, list[tuple[int, ...]]]:
    logits_shape, label_shape = shapes
    n = logits_shape[0]
    if len(logits_shape) != 2 or math.prod(label_shape) != n:
        raise CaffeFormatError(f"{where}: SoftmaxWithLoss needs logits (N, C) and N labels, got "
                               f"shapes {logits_shape} and {label_shape}")
    loss_param = layer.loss_param
    mode = loss_param.normalization
    if not loss_param.HasField("normalization") and loss_param.HasField("normalize"):
        mode = pb.LossParameter.VALID if loss_param.normalize else pb.LossParameter.BATCH_SIZE
    ignore = loss_param.ignore_label if loss_param.HasField("ignore_label") else None

    def forward(bottoms: list[Tensor]) -> list[Tensor]:
        logits, label_blob = bottoms
        xp = logits.xp
        raw = label_blob.data.reshape(-1)
        labels = xp.rint(raw).astype(xp.int64)
        if not bool((labels == raw).all()):
            raise ValueError(f"{where}: SoftmaxWithLoss labels must be whole numbers")
        keep = xp.ones(labels.shape, dtype=bool) if ignore is None else labels != ignore
        losses = ops.softmax_cross_entropy(logits, xp.where(keep, labels, 0), reduction="none")
        total = (losses * Tensor(keep.astype(logits.dtype))).sum()
        valid = int(keep.sum())
        norm = {pb.LossParameter.FULL: n, pb.LossParameter.VALID: valid,
                pb.LossParameter.BATCH_SIZE: n, pb.LossParameter.NONE: 1}[mode]
        return [total / max(norm, 1)]

    return forward, [()]


# --------------------------------------------------------------------------- the net


@dataclass
class Layer:
    name: str
    type: str
    bottom: list[str]
    top: list[str]
    forward: Forward
    loss_weight: float  # 0 for layers whose output is not a loss


class Net:
    """The TRAIN net of a NetParameter: data layers, then compute layers in written order."""

    def __init__(self, net: pb.NetParameter, sources: list[LayerSource], base: Path,
                 dtype: Any = np.float32, device: str = "cpu",
                 rng: np.random.Generator | None = None) -> None:
        backend.check_device(device)
        self.dtype, self.device = np.dtype(dtype), device
        rng = rng if rng is not None else np.random.default_rng()
        self.data: list[DataLayer] = []
        self.layers: list[Layer] = []
        self.params: list[Param] = []
        shapes: dict[str, tuple[int, ...]] = {}
        names: set[str] = set()
        for spec, source in zip(net.layer, sources):
            where = f"{source.path}:{source.line}: layer '{spec.name}'"
            if spec.type not in LAYER_TYPES:
                raise CaffeFormatError(
                    f"{source.path}:{source.type_line}: layer '{spec.name}' has type "
                    f"{spec.type!r}, which edu_dl does not support (supported: "
                    f"{', '.join(LAYER_TYPES)})")
            if spec.name in names:
                raise CaffeFormatError(f"{where}: a layer of this name is already defined")
            names.add(spec.name)
            missing = [b for b in spec.bottom if b not in shapes]
            if missing:
                raise CaffeFormatError(
                    f"{where}: bottom blob {', '.join(map(repr, missing))} is not produced by "
                    f"any layer above it (layers run in the order written; known blobs: "
                    f"{', '.join(shapes) or 'none'})")
            if spec.type in DATA_TYPES:
                data = DataLayer(spec, where, base, self.dtype, device, rng)
                self.data.append(data)
                shapes.update(data.shapes())
                continue
            self._add(spec, where, [shapes[b] for b in spec.bottom], shapes, rng)
        if not any(layer.loss_weight for layer in self.layers):
            raise CaffeFormatError(f"{sources[0].path if sources else 'net'}: the TRAIN net has "
                                   f"no loss layer ({', '.join(LOSS_TYPES)}); nothing to train")

    def _add(self, spec: pb.LayerParameter, where: str, bottoms: list[tuple[int, ...]],
             shapes: dict[str, tuple[int, ...]], rng: np.random.Generator) -> None:
        want = {"Convolution": 1, "Pooling": 1, "InnerProduct": 1, "ReLU": 1, "EuclideanLoss": 2,
                "SoftmaxWithLoss": 2}[spec.type]
        if len(bottoms) != want or len(spec.top) != 1:
            raise CaffeFormatError(f"{where}: {spec.type} takes {want} bottom(s) and 1 top, got "
                                   f"{len(bottoms)} and {len(spec.top)}")
        if spec.loss_weight and spec.type not in LOSS_TYPES:
            raise CaffeFormatError(f"{where}: loss_weight is only supported on loss layers")
        n_params = len(self.params)

        def make(index: str, shape: tuple[int, ...], filler: pb.FillerParameter) -> Tensor:
            values = fill(filler, shape, rng, where).astype(self.dtype)
            t = Tensor(values, requires_grad=True, device=self.device)
            i = int(index)
            spec_i = spec.param[i] if i < len(spec.param) else pb.ParamSpec()
            self.params.append(Param(f"{spec.name}/{index}", t, spec_i.lr_mult,
                                     spec_i.decay_mult))
            return t

        if spec.type == "Convolution":
            forward, tops = _convolution(spec, bottoms, where, make)
        elif spec.type == "Pooling":
            forward, tops = _pooling(spec, bottoms, where)
        elif spec.type == "InnerProduct":
            forward, tops = _inner_product(spec, bottoms, where, make)
        elif spec.type == "ReLU":
            forward, tops = _relu(spec, bottoms)
        elif spec.type == "EuclideanLoss":
            forward, tops = _euclidean(bottoms, where)
        else:
            forward, tops = _softmax_loss(spec, bottoms, where)
        if len(spec.param) > len(self.params) - n_params:
            raise CaffeFormatError(f"{where}: {len(spec.param)} param {{ }} blocks for "
                                   f"{len(self.params) - n_params} parameter blob(s)")
        if any(p.name for p in spec.param):
            raise CaffeFormatError(f"{where}: named (shared) parameters are not supported")
        default = 1.0 if spec.type in LOSS_TYPES else 0.0
        weight = spec.loss_weight[0] if spec.loss_weight else default
        self.layers.append(Layer(spec.name, spec.type, list(spec.bottom), list(spec.top),
                                 forward, weight))
        shapes.update(zip(spec.top, tops))

    def forward(self) -> tuple[Tensor, dict[str, Tensor]]:
        """Run one batch through the net: (total weighted loss, every blob by name)."""
        blobs: dict[str, Tensor] = {}
        for data in self.data:
            blobs.update(data.next_batch())
        loss: Tensor | None = None
        for layer in self.layers:
            tops = layer.forward([blobs[b] for b in layer.bottom])
            blobs.update(zip(layer.top, tops))  # bottom == top: in place, as Caffe's ReLU
            if layer.loss_weight:
                term = tops[0] * layer.loss_weight if layer.loss_weight != 1 else tops[0]
                loss = term if loss is None else loss + term
        assert loss is not None  # the constructor checked that a loss layer exists
        return loss, blobs

    def named_params(self) -> Iterator[tuple[str, Tensor]]:
        for p in self.params:
            yield p.name, p.tensor

    def weights(self) -> dict[str, np.ndarray]:
        """Every parameter as a NumPy array, keyed ``<layer>/<i>`` (Caffe's blob order)."""
        return {name: backend.to_numpy(t.data) for name, t in self.named_params()}

    def load_weights(self, path: str | Path) -> list[str]:
        """Copy ``<layer>/<i>`` arrays from an .npz (Caffe's ``-weights``); returns those unused."""
        with np.load(path) as npz:
            stored = {k: np.asarray(npz[k]) for k in npz.files}
        for name, t in self.named_params():
            if name not in stored:
                continue
            value = stored.pop(name)
            if value.shape != t.shape:
                raise ValueError(f"{path}: '{name}' has shape {value.shape}, but the net's "
                                 f"parameter has shape {t.shape}")
            t.data = backend.to_device(value.astype(self.dtype), self.device)
        return sorted(stored)
