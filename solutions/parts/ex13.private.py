"""Exercise 13, Caffe and the landscape: a Caffe net's forward pass, run layer by layer by hand.

The oracle is ``edu_dl.caffe``'s own reader and ``Net``: the layers behind an HDF5Data layer serving
the case's x and y, with the case's weights. Judged outside the sandbox: the loss and the last
blob against the oracle, and, from the submitted source, that it does not build the oracle's
edu_dl.caffe Net (``source_check``). The mistake replays run the layers with one convention
broken (W not transposed, no bias, a ReLU skipped, the loss's scale).
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from edu_dl.grading.authoring.hints import Mistake, close
from edu_dl.grading.authoring.source import names_check
from edu_dl.grading.authoring.spec import Part, tolerance

Array = np.ndarray
Case = tuple[Any, ...]
CLOSE = tolerance(rtol=1e-7, atol=1e-10)


# --------------------------------------------------------------------------- Caffe

_IP = ('layer {{ name: "{name}" type: "InnerProduct" bottom: "{bottom}" top: "{top}" '
       'inner_product_param {{ num_output: {out} }} }}')
_RELU = 'layer {{ name: "{name}" type: "ReLU" bottom: "{bottom}" top: "{top}" }}'
_LOSS = ('layer {{ name: "{name}" type: "EuclideanLoss" bottom: "{pred}" bottom: "y" '
         'top: "{name}" }}')


def _net_case(rng: np.random.Generator, n: int, dims: list[int], in_place: bool,
              relu_last: bool = False, names: tuple[str, str, str] = ("fc", "relu", "loss")
              ) -> Case:
    """InnerProducts of sizes dims[1:] on x (n, dims[0]), ReLU between them, EuclideanLoss."""
    lines, params = [], []
    blob = "x"
    n_ip = len(dims) - 1
    for i in range(n_ip):
        top = f"h{i + 1}" if i < n_ip - 1 else "y_hat"
        lines.append(_IP.format(name=f"{names[0]}{i + 1}", bottom=blob, top=top,
                                out=dims[i + 1]))
        params += [rng.standard_normal((dims[i + 1], dims[i])), rng.standard_normal(dims[i + 1])]
        blob = top
        if i < n_ip - 1 or relu_last:
            top = blob if in_place else f"{blob}_relu"
            lines.append(_RELU.format(name=f"{names[1]}{i + 1}", bottom=blob, top=top))
            blob = top
    lines.append(_LOSS.format(name=names[2], pred=blob))
    x = rng.standard_normal((n, dims[0]))
    y = rng.standard_normal((n, dims[-1]))
    return (np.array(lines), x, y, *params)


def _caffe_cases(rng: np.random.Generator, hidden: bool) -> list[Case]:
    if not hidden:
        return [_net_case(rng, 4, [5, 3, 2], in_place=True),  # the lecture's net, small
                _net_case(rng, 3, [4, 4, 4], in_place=False, names=("ip", "act", "euclid")),
                _net_case(rng, 2, [3, 2], in_place=True)]
    cases: list[Case] = []
    for _ in range(3):
        depth = int(rng.integers(1, 4))
        dims = [int(d) for d in rng.integers(1, 6, size=depth + 1)]
        cases.append(_net_case(rng, int(rng.integers(1, 6)), dims, bool(rng.integers(0, 2)),
                               relu_last=bool(rng.integers(0, 2)),
                               names=("ip", "r", "loss") if rng.integers(0, 2) else
                               ("fc", "relu", "cost")))
    cases.append(_net_case(rng, 3, [4, 4, 4, 4], in_place=False))  # square: transposes pass
    return cases


def _caffe_expected(lines: Array, x: Array, y: Array, *params: Array) -> tuple[float, Array]:
    """edu_dl.caffe itself: the layers behind an HDF5Data layer serving x and y, these weights."""
    from edu_dl.caffe import Net, read_net

    with tempfile.TemporaryDirectory(prefix="edu_dl_ex13_") as tmp:
        folder = Path(tmp)
        np.savez(folder / "data.npz", x=x, y=y)
        data = ('layer { name: "data" type: "HDF5Data" top: "x" top: "y" '
                f'hdf5_data_param {{ source: "data.npz" batch_size: {len(x)} }} }}')
        (folder / "net.prototxt").write_text("\n".join([data, *map(str, lines)]) + "\n")
        spec, sources = read_net(folder / "net.prototxt")
        net = Net(spec, sources, folder, dtype=np.float64)
        for param, value in zip(net.params, params, strict=True):
            param.tensor.data = np.asarray(value, dtype=np.float64)
        loss, blobs = net.forward()
    (loss_layer,) = [layer for layer in net.layers if layer.loss_weight]
    return float(loss.item()), blobs[loss_layer.bottom[0]].numpy().copy()


def _np_forward(lines: Array, x: Array, y: Array, params: tuple[Array, ...],
                transpose: bool = True, bias: bool = True, relu: bool = True
                ) -> tuple[Array, Array]:
    """A NumPy reading of the same layers with one thing changed, for hints."""
    from google.protobuf import text_format

    from edu_dl.caffe import caffe_subset_pb2 as pb

    blobs = {"x": x, "y": y}
    it = iter(params)
    pred = x
    for line in lines:
        layer = text_format.Parse(str(line), pb.NetParameter()).layer[0]
        if layer.type == "InnerProduct":
            W, b = next(it), next(it)
            out = blobs[layer.bottom[0]] @ (W.T if transpose else W) + (b if bias else 0)
        elif layer.type == "ReLU":
            out = np.maximum(blobs[layer.bottom[0]], 0) if relu else blobs[layer.bottom[0]]
        else:
            pred = blobs[layer.bottom[0]]
            continue
        blobs[layer.top[0]] = out
    return pred, pred - y


def _caffe_mistake(**kw: bool) -> Callable[[Any, Case], Any]:
    """y_hat as the layers read with one thing changed; None where that changes nothing or
    cannot run (W not transposed does not multiply unless it is square)."""
    def replay(e: Any, a: Case) -> Any:
        try:
            pred, _ = _np_forward(a[0], a[1], a[2], a[3:], **kw)
        except Exception:  # this reading cannot run on the net: the hint does not apply
            return None
        return None if close(pred, e[1], rtol=1e-7, atol=1e-10) else pred

    return replay


def _loss_scaled(factor: Callable[[Array], float]) -> Callable[[Any, Case], Any]:
    """(a wrong loss, the right y_hat): y_hat right, the loss scaled wrongly."""
    def replay(e: Any, a: Case) -> Any:
        wrong = factor(np.asarray(e[1]) - a[2])
        return None if close(wrong, e[0], rtol=1e-7, atol=1e-10) else (wrong, e[1])

    return replay


CAFFE_SOURCE = names_check(forbidden=[(
    ("Net", "read_net", "build", "train", "Solver", "filter_net"),
    "this part asks you to run the layers yourself, one after the other: the check compares "
    "with edu_dl.caffe (do not build an edu_dl.caffe Net)")])

CAFFE_HINTS = (
    Mistake(_caffe_mistake(transpose=False),
            "InnerProduct stores W as (num_output, K), as nn.Linear does: y = x @ W.T + b",
            output=1, rtol=1e-7, atol=1e-10),
    Mistake(_caffe_mistake(bias=False), "add the bias: y = x @ W.T + b", output=1,
            rtol=1e-7, atol=1e-10),
    Mistake(_caffe_mistake(relu=False),
            "a ReLU layer was skipped: run every layer in the order written; with bottom == top "
            "it works in place, replacing the blob", output=1, rtol=1e-7, atol=1e-10),
    Mistake(_loss_scaled(lambda d: float(np.mean(d**2))),
            "EuclideanLoss is sum((y_hat - y)**2) / (2 N), N = rows: not the mean over all "
            "entries", rtol=1e-7, atol=1e-10),
    Mistake(_loss_scaled(lambda d: float(np.sum(d**2) / len(d))),
            "EuclideanLoss divides by 2 N, not N", rtol=1e-7, atol=1e-10),
    Mistake(_loss_scaled(lambda d: float(np.sum(d**2))),
            "EuclideanLoss divides the sum of squares by 2 N", rtol=1e-7, atol=1e-10),
)


PARTS = [
    Part(
        id="ex13.caffe_forward", points=3, cases=_caffe_cases, expected=_caffe_expected,
        compare=CLOSE, arg_names=("lines", "x", "y", *(f"params[{i}]" for i in range(8))),
        output_names=("loss", "y_hat"), source_check=CAFFE_SOURCE,
        hints=CAFFE_HINTS,
    ),
]
