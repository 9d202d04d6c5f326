"""Caffe, the declarative way: real prototxt syntax, clear errors, and parity with NumPy."""

from __future__ import annotations

import ast
import importlib.util
import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import edu_dl
from edu_dl import caffe
from edu_dl.caffe import caffe_subset_pb2 as pb
from edu_dl.caffe.examples import TWO_LAYER_DATA, two_layer_data
from edu_dl.caffe.net import DataLayer
from edu_dl.cli import main

PROTO = Path(caffe.__file__).with_name("caffe_subset.proto")
REPO = PROTO.parents[2]


def write(path: Path, text: str) -> Path:
    path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return path


# A two-layer ReLU net in the style of Caffe's own examples: comments, quoted strings, repeated
# top/bottom/param fields, include { phase }, an in-place ReLU, and TEST-only layers.
NET = """
# The lecture's two-layer net, Caffe-style.
name: "TwoLayer"
layer {
  name: "data"
  type: "HDF5Data"
  top: "x"
  top: "y"
  include { phase: TRAIN }
  hdf5_data_param { source: "train.npz" batch_size: 8 }
}
layer {
  name: "data"
  type: "HDF5Data"
  top: "x"
  top: "y"
  include { phase: TEST }
  hdf5_data_param { source: "no_test_file.npz" batch_size: 8 }
}
layer {
  name: "fc1"   # the hidden layer
  type: "InnerProduct"
  bottom: "x"
  top: "h"
  param { lr_mult: 1 }
  param { lr_mult: 1 }
  inner_product_param {
    num_output: 6
    weight_filler { type: "gaussian" std: 0.1 }
    bias_filler { type: "constant" value: 0.1 }
  }
}
layer { name: "relu1" type: "ReLU" bottom: "h" top: "h" }
layer {
  name: "fc2"
  type: "InnerProduct"
  bottom: "h"
  top: "y_hat"
  inner_product_param { num_output: 3 weight_filler { type: "xavier" } }
}
layer {
  name: "accuracy"
  type: "Accuracy"
  bottom: "y_hat"
  bottom: "y"
  top: "accuracy"
  include { phase: TEST }
}
layer { name: "loss" type: "EuclideanLoss" bottom: "y_hat" bottom: "y" top: "loss" }
"""

SOLVER = """
net: "net.prototxt"
type: "SGD"
base_lr: 0.01
momentum: 0.9
lr_policy: "fixed"
max_iter: 20
display: 5
random_seed: 1
"""

N, D_IN, H, D_OUT = 8, 5, 6, 3


@pytest.fixture
def two_layer(tmp_path: Path) -> tuple[Path, Path, dict[str, np.ndarray]]:
    """net.prototxt, solver.prototxt and the training data (x, y) in tmp_path."""
    rng = np.random.default_rng(7)
    data = {"x": rng.standard_normal((N, D_IN)), "y": rng.standard_normal((N, D_OUT))}
    np.savez(tmp_path / "train.npz", **data)
    return write(tmp_path / "net.prototxt", NET), write(tmp_path / "solver.prototxt", SOLVER), data


def initial_weights(path: Path, seed: int = 3) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    w = {"fc1/0": rng.standard_normal((H, D_IN)) * 0.5, "fc1/1": rng.standard_normal(H) * 0.1,
         "fc2/0": rng.standard_normal((D_OUT, H)) * 0.5, "fc2/1": rng.standard_normal(D_OUT) * 0.1}
    np.savez(path, **w)
    return w


def numpy_two_layer(x, y, w, steps, lr, solver="SGD", momentum=0.9, momentum2=0.999,
                    delta=1e-8):
    """Hand-written forward, backward and Caffe's update for the two-layer net; the losses."""
    w = {k: v.copy() for k, v in w.items()}
    n = x.shape[0]
    state = {k: (np.zeros_like(v), np.zeros_like(v)) for k, v in w.items()}
    losses = []
    for t in range(1, steps + 1):
        h = x @ w["fc1/0"].T + w["fc1/1"]
        h_relu = np.maximum(h, 0)
        y_hat = h_relu @ w["fc2/0"].T + w["fc2/1"]
        diff = y_hat - y
        losses.append((diff**2).sum() / (2 * n))  # EuclideanLoss
        d_y_hat = diff / n
        d_h = (d_y_hat @ w["fc2/0"]) * (h > 0)
        grads = {"fc2/0": d_y_hat.T @ h_relu, "fc2/1": d_y_hat.sum(0),
                 "fc1/0": d_h.T @ x, "fc1/1": d_h.sum(0)}
        for k, g in grads.items():
            m, v = state[k]
            if solver == "SGD":
                m = momentum * m + lr * g
                w[k] -= m
            else:
                m = momentum * m + (1 - momentum) * g
                v = momentum2 * v + (1 - momentum2) * g * g
                correction = math.sqrt(1 - momentum2**t) / (1 - momentum**t)
                w[k] -= lr * correction * m / (np.sqrt(v) + delta)
            state[k] = (m, v)
    return np.array(losses), w


def f32(value: float) -> float:
    """A solver float as Caffe holds it: caffe.proto declares base_lr & co. as float."""
    return float(np.float32(value))


# --------------------------------------------------------------------------- the schema


def _serialized_descriptor(module_path: Path) -> bytes:
    """The bytes a generated *_pb2.py passes to AddSerializedFile, read without importing it."""
    for node in ast.walk(ast.parse(module_path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "AddSerializedFile":
            value = node.args[0]
            assert isinstance(value, ast.Constant) and isinstance(value.value, bytes)
            return value.value
    raise AssertionError(f"{module_path} does not look like protoc output")


def test_generated_module_matches_the_proto_file(tmp_path: Path) -> None:
    if importlib.util.find_spec("grpc_tools") is None:
        pytest.skip("grpcio-tools (protoc) is not installed: cannot regenerate the module")
    subprocess.run([sys.executable, "-m", "grpc_tools.protoc", f"-I{REPO}",
                    f"--python_out={tmp_path}", str(PROTO.relative_to(REPO))],
                   check=True, cwd=REPO)
    fresh = _serialized_descriptor(tmp_path / "edu_dl" / "caffe" / "caffe_subset_pb2.py")
    committed = Path(pb.__file__)
    assert fresh == _serialized_descriptor(committed), (
        "caffe_subset_pb2.py is stale: regenerate it (the command is in caffe_subset.proto)")


# Field numbers from BVLC Caffe's src/caffe/proto/caffe.proto: a real Caffe binary file relies
# on these, and a typo here would still parse text files.
CAFFE_NUMBERS = {
    "NetParameter": {"name": 1, "state": 6, "layer": 100},
    "LayerParameter": {"name": 1, "type": 2, "bottom": 3, "top": 4, "loss_weight": 5,
                       "param": 6, "include": 8, "exclude": 9, "phase": 10, "loss_param": 101,
                       "convolution_param": 106, "hdf5_data_param": 112,
                       "inner_product_param": 117, "pooling_param": 121, "relu_param": 123},
    "ConvolutionParameter": {"num_output": 1, "bias_term": 2, "pad": 3, "kernel_size": 4,
                             "group": 5, "stride": 6, "weight_filler": 7, "bias_filler": 8,
                             "pad_h": 9, "pad_w": 10, "kernel_h": 11, "kernel_w": 12,
                             "stride_h": 13, "stride_w": 14},
    "PoolingParameter": {"pool": 1, "kernel_size": 2, "stride": 3, "pad": 4, "kernel_h": 5,
                         "kernel_w": 6, "stride_h": 7, "stride_w": 8, "pad_h": 9, "pad_w": 10,
                         "global_pooling": 12},
    "InnerProductParameter": {"num_output": 1, "bias_term": 2, "weight_filler": 3,
                              "bias_filler": 4, "axis": 5, "transpose": 6},
    "FillerParameter": {"type": 1, "value": 2, "min": 3, "max": 4, "mean": 5, "std": 6,
                        "sparse": 7, "variance_norm": 8},
    "HDF5DataParameter": {"source": 1, "batch_size": 2, "shuffle": 3},
    "LossParameter": {"ignore_label": 1, "normalize": 2, "normalization": 3},
    "NetStateRule": {"phase": 1, "min_level": 2, "max_level": 3, "stage": 4, "not_stage": 5},
    "ParamSpec": {"name": 1, "lr_mult": 3, "decay_mult": 4},
    "SolverParameter": {"train_net": 1, "base_lr": 5, "display": 6, "max_iter": 7,
                        "lr_policy": 8, "gamma": 9, "power": 10, "momentum": 11,
                        "weight_decay": 12, "random_seed": 20, "net": 24, "delta": 31,
                        "iter_size": 36, "momentum2": 39, "type": 40, "solver_type": 30},
}


@pytest.mark.parametrize("message", sorted(CAFFE_NUMBERS))
def test_field_numbers_are_caffes(message: str) -> None:
    fields = getattr(pb, message).DESCRIPTOR.fields_by_name
    assert {name: fields[name].number for name in CAFFE_NUMBERS[message]} == CAFFE_NUMBERS[message]


def test_pooling_methods_are_caffes() -> None:
    assert dict(pb.PoolingParameter.PoolMethod.items()) == {"MAX": 0, "AVE": 1, "STOCHASTIC": 2}


def test_caffe_binary_round_trip() -> None:
    """Binary-encoded messages decode with the same numbers (how .caffemodel files are read)."""
    layer = pb.LayerParameter(name="fc", type="InnerProduct")
    layer.inner_product_param.num_output = 7
    data = layer.SerializeToString()
    # 0x0a = field 1 (name), 0x12 = field 2 (type); 117 << 3 | 2 = 938 = varint 0xaa 0x07.
    assert data.startswith(b"\x0a\x02fc\x12\x0cInnerProduct\xaa\x07")
    assert pb.LayerParameter.FromString(data) == layer


# --------------------------------------------------------------------------- real syntax


def test_real_caffe_syntax_and_train_phase(two_layer) -> None:
    net_path, _, _ = two_layer
    net, sources = caffe.read_net(net_path)
    assert [layer.name for layer in net.layer] == [
        "data", "data", "fc1", "relu1", "fc2", "accuracy", "loss"]
    assert list(net.layer[0].top) == ["x", "y"] and len(net.layer[2].param) == 2
    assert net.layer[2].inner_product_param.weight_filler.std == pytest.approx(0.1)
    assert [s.line for s in sources] == [3, 11, 19, 32, 33, 40, 48]
    assert [s.type_line for s in sources] == [5, 13, 21, 32, 35, 42, 48]
    train, _ = caffe.filter_net(net, sources, pb.TRAIN)
    assert [layer.name for layer in train.layer] == ["data", "fc1", "relu1", "fc2", "loss"]
    test, _ = caffe.filter_net(net, sources, pb.TEST)
    assert [layer.name for layer in test.layer] == [
        "data", "fc1", "relu1", "fc2", "accuracy", "loss"]
    assert test.layer[0].hdf5_data_param.source == "no_test_file.npz"


def test_lenet_solver_parses(tmp_path: Path) -> None:
    """Caffe's examples/mnist/lenet_solver.prototxt, verbatim."""
    path = write(tmp_path / "lenet_solver.prototxt", """
        # The train/test net protocol buffer definition
        net: "examples/mnist/lenet_train_test.prototxt"
        # test_iter specifies how many forward passes the test should carry out.
        test_iter: 100
        # Carry out testing every 500 training iterations.
        test_interval: 500
        # The base learning rate, momentum and the weight decay of the network.
        base_lr: 0.01
        momentum: 0.9
        weight_decay: 0.0005
        # The learning rate policy
        lr_policy: "inv"
        gamma: 0.0001
        power: 0.75
        # Display every 100 iterations
        display: 100
        # The maximum number of iterations
        max_iter: 10000
        # snapshot intermediate results
        snapshot: 5000
        snapshot_prefix: "examples/mnist/lenet"
        # solver mode: CPU or GPU
        solver_mode: GPU
    """)
    solver = caffe.read_solver(path)
    assert solver.net == "examples/mnist/lenet_train_test.prototxt"
    assert (solver.max_iter, solver.display, list(solver.test_iter)) == (10000, 100, [100])
    assert solver.solver_mode == pb.SolverParameter.GPU and solver.type == "SGD"
    expected = f32(0.01) * (1 + f32(0.0001) * 1000) ** -f32(0.75)
    assert caffe.learning_rate(solver, 1000) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize(("policy", "fields", "it", "expected"), [
    ("fixed", "", 7, 0.5),
    ("step", "gamma: 0.5 stepsize: 3", 7, 0.5 * 0.5**2),
    ("exp", "gamma: 0.5", 3, 0.5 * 0.5**3),
    ("multistep", "gamma: 0.5 stepvalue: 2 stepvalue: 5", 5, 0.5 * 0.5**2),
    ("poly", "power: 2 max_iter: 10", 5, 0.5 * 0.5**2),
])
def test_learning_rate_policies(policy: str, fields: str, it: int, expected: float) -> None:
    from google.protobuf import text_format

    solver = text_format.Parse(f'base_lr: 0.5 lr_policy: "{policy}" {fields}',
                               pb.SolverParameter())
    assert caffe.learning_rate(solver, it) == pytest.approx(expected, rel=1e-12)


# --------------------------------------------------------------------------- bad files


def _error(tmp_path: Path, net_text: str | None = None, solver_text: str = SOLVER) -> str:
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "train.npz", x=rng.standard_normal((N, D_IN)),
             y=rng.standard_normal((N, D_OUT)))
    if net_text is not None:
        write(tmp_path / "net.prototxt", net_text)
    solver = write(tmp_path / "solver.prototxt", solver_text)
    with pytest.raises((caffe.CaffeFormatError, FileNotFoundError)) as info:
        caffe.train(None, solver)
    return str(info.value)


def test_unknown_field_names_file_line_and_column(tmp_path: Path) -> None:
    bad = NET.replace('num_output: 6', 'num_output: 6\n    dropout_ratio: 0.5')
    message = _error(tmp_path, bad)
    assert "net.prototxt:28:" in message and "dropout_ratio" in message


def test_syntax_error_names_the_line(tmp_path: Path) -> None:
    bad = NET.replace('layer { name: "relu1"', 'layer { name: "relu1" }')
    message = _error(tmp_path, bad)
    assert "net.prototxt:32:" in message


def test_unknown_layer_type_names_the_line_of_its_type(tmp_path: Path) -> None:
    bad = NET.replace('name: "fc2"\n  type: "InnerProduct"', 'name: "fc2"\n  type: "LRN"')
    message = _error(tmp_path, bad)
    assert "net.prototxt:35:" in message and "'LRN'" in message
    assert "InnerProduct" in message  # says what is supported


def test_test_only_layers_of_unknown_type_are_dropped_not_errors(two_layer) -> None:
    """The TEST-phase Accuracy layer is not supported, but training never builds it."""
    net_path, solver_path, _ = two_layer
    assert len(caffe.train(net_path, solver_path, display=0).losses) == 20


def test_bottom_that_nothing_produced(tmp_path: Path) -> None:
    bad = NET.replace('bottom: "h"\n  top: "y_hat"', 'bottom: "hidden"\n  top: "y_hat"')
    message = _error(tmp_path, bad)
    assert "net.prototxt:33: layer 'fc2'" in message and "'hidden'" in message


def test_layer_order_is_the_graph(tmp_path: Path) -> None:
    """A layer may only read blobs from layers written above it, as in Caffe."""
    lines = NET.split("layer {")
    swapped = "layer {".join([lines[0], lines[1], lines[2], lines[4], lines[3], *lines[5:]])
    message = _error(tmp_path, swapped)
    assert "layer 'relu1'" in message and "'h' is not produced" in message


def test_missing_source_file(tmp_path: Path) -> None:
    message = _error(tmp_path, NET.replace('"train.npz"', '"nowhere.npz"'))
    assert "nowhere.npz" in message and "hdf5_data_param.source" in message


def test_solver_without_net(tmp_path: Path) -> None:
    message = _error(tmp_path, NET, SOLVER.replace('net: "net.prototxt"', ""))
    assert "solver.prototxt" in message and "names no net" in message


def test_unsupported_solver_type(tmp_path: Path) -> None:
    message = _error(tmp_path, NET, SOLVER.replace('"SGD"', '"Nesterov"'))
    assert "'Nesterov'" in message and "SGD, Adam" in message


def test_missing_dataset_in_source(tmp_path: Path) -> None:
    message = _error(tmp_path, NET.replace('top: "y"\n  include { phase: TRAIN }',
                                           'top: "label"\n  include { phase: TRAIN }'))
    assert "no dataset 'label'" in message and "x, y" in message


def test_missing_net_file(tmp_path: Path) -> None:
    message = _error(tmp_path, None, SOLVER.replace("net.prototxt", "absent.prototxt"))
    assert "absent.prototxt" in message


# --------------------------------------------------------------------------- parity


@pytest.mark.parametrize("solver_type", ["SGD", "Adam"])
def test_same_losses_as_hand_written_numpy(two_layer, tmp_path: Path, solver_type: str) -> None:
    net_path, solver_path, data = two_layer
    if solver_type == "Adam":
        write(solver_path, SOLVER.replace('"SGD"', '"Adam"')
              .replace("momentum: 0.9", "momentum: 0.9 momentum2: 0.99 delta: 1e-6"))
    w0 = initial_weights(tmp_path / "w0.npz")
    history = caffe.train(net_path, solver_path, weights=tmp_path / "w0.npz",
                          dtype=np.float64, display=0)
    expected, w_final = numpy_two_layer(data["x"], data["y"], w0, 20, f32(0.01), solver_type,
                                        f32(0.9), f32(0.99), f32(1e-6))
    assert edu_dl.rel_error(np.array(history.losses), expected) < 1e-10
    assert expected[-1] < 0.5 * expected[0]  # it trains
    for key, value in w_final.items():
        assert edu_dl.rel_error(history.weights[key], value) < 1e-10, key


def test_mini_batches_wrap_around_in_order(two_layer, tmp_path: Path) -> None:
    """batch_size 3 of 8 rows: the net sees rows 0-2, 3-5, 6,7,0, ... as Caffe's HDF5Data."""
    net_path, solver_path, data = two_layer
    write(net_path, NET.replace("batch_size: 8 }", "batch_size: 3 }", 1))
    w0 = initial_weights(tmp_path / "w0.npz")
    history = caffe.train(net_path, solver_path, weights=tmp_path / "w0.npz",
                          dtype=np.float64, display=0)
    rows = [np.arange(3 * i, 3 * i + 3) % N for i in range(2)]
    x, y = data["x"], data["y"]
    first, w1 = numpy_two_layer(x[rows[0]], y[rows[0]], w0, 1, f32(0.01), momentum=0.0)
    second, _ = numpy_two_layer(x[rows[1]], y[rows[1]], w1, 1, f32(0.01), momentum=0.0)
    assert edu_dl.rel_error(np.array(history.losses[:2]), np.r_[first, second]) < 1e-10


def test_hdf5_list_source(tmp_path: Path) -> None:
    """Caffe's HDF5Data source: a text file naming HDF5 files, read in order."""
    h5py = pytest.importorskip("h5py", reason="h5py is not installed")
    rng = np.random.default_rng(0)
    x = rng.standard_normal((5, 2))
    for name, part in (("a.h5", x[:2]), ("b.h5", x[2:])):
        with h5py.File(tmp_path / name, "w") as f:
            f["x"] = part
    write(tmp_path / "list.txt", "a.h5\nb.h5\n")
    layer = pb.LayerParameter(name="data", type="HDF5Data", top=["x"])
    layer.hdf5_data_param.source = "list.txt"
    layer.hdf5_data_param.batch_size = 4
    data = DataLayer(layer, "test", tmp_path, np.float64, "cpu", np.random.default_rng(0))
    assert np.array_equal(data.next_batch()["x"].numpy(), x[:4])
    assert np.array_equal(data.next_batch()["x"].numpy(), x[[4, 0, 1, 2]])


def test_softmax_with_loss_matches_numpy(tmp_path: Path) -> None:
    from sklearn.datasets import load_digits

    digits = load_digits()
    x, labels = digits.data[:100] / 16.0, digits.target[:100].astype(np.float64)  # Caffe: float
    np.savez(tmp_path / "digits.npz", data=x, label=labels)
    write(tmp_path / "net.prototxt", """
        layer { name: "d" type: "HDF5Data" top: "data" top: "label"
                hdf5_data_param { source: "digits.npz" batch_size: 100 } }
        layer { name: "fc" type: "InnerProduct" bottom: "data" top: "score"
                inner_product_param { num_output: 10
                                      weight_filler { type: "gaussian" std: 0.01 } } }
        layer { name: "loss" type: "SoftmaxWithLoss" bottom: "score" bottom: "label" top: "loss" }
    """)
    solver = write(tmp_path / "solver.prototxt",
                   SOLVER.replace("max_iter: 20", "max_iter: 30").replace("0.01", "0.5"))
    net, _ = caffe.build(None, solver, dtype=np.float64)
    w, b = (p.tensor.numpy() for p in net.params)
    scores = x @ w.T + b
    log_p = scores - scores.max(1, keepdims=True)
    log_p -= np.log(np.exp(log_p).sum(1, keepdims=True))
    expected = -log_p[np.arange(100), digits.target[:100]].mean()
    loss, _ = net.forward()
    assert loss.item() == pytest.approx(expected, rel=1e-12)
    history = caffe.train(None, solver, dtype=np.float64, display=0)
    assert history.losses[-1] < 0.3 * history.losses[0]


def test_lr_mult_zero_freezes_a_layer(two_layer, tmp_path: Path) -> None:
    net_path, solver_path, _ = two_layer
    write(net_path, NET.replace("param { lr_mult: 1 }\n  param { lr_mult: 1 }",
                                "param { lr_mult: 0 }\n  param { lr_mult: 0 }"))
    w0 = initial_weights(tmp_path / "w0.npz")
    history = caffe.train(net_path, solver_path, weights=tmp_path / "w0.npz", display=0)
    assert np.array_equal(history.weights["fc1/0"], w0["fc1/0"].astype(np.float32))
    assert not np.allclose(history.weights["fc2/0"], w0["fc2/0"])


def test_random_seed_makes_training_repeatable(two_layer) -> None:
    net_path, solver_path, _ = two_layer
    a = caffe.train(net_path, solver_path, display=0)
    b = caffe.train(net_path, solver_path, display=0)
    write(solver_path, SOLVER.replace("random_seed: 1", "random_seed: 2"))
    c = caffe.train(net_path, solver_path, display=0)
    assert a.losses == b.losses and a.losses[0] != c.losses[0]


@pytest.mark.gpu
@pytest.mark.skipif(not edu_dl.gpu_status()[0], reason="no CUDA GPU here")
def test_gpu_gives_the_cpu_losses(two_layer, tmp_path: Path) -> None:
    net_path, solver_path, _ = two_layer
    initial_weights(tmp_path / "w0.npz")
    runs = [caffe.train(net_path, solver_path, weights=tmp_path / "w0.npz", dtype=np.float64,
                        device=device, display=0) for device in ("cpu", "gpu")]
    assert edu_dl.rel_error(np.array(runs[0].losses), np.array(runs[1].losses)) < 1e-10


@pytest.mark.usefixtures("numpy_as_cupy")
def test_gpu_gives_the_cpu_losses_on_numpy_as_cupy(two_layer, tmp_path: Path) -> None:
    """The test above where CI has no GPU: NumPy stands in for CuPy behind device='gpu'."""
    test_gpu_gives_the_cpu_losses(two_layer, tmp_path)


# --------------------------------------------------------------------------- the command


def test_edu_dl_train_prints_losses_and_writes_weights(two_layer, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    net_path, solver_path, _ = two_layer
    out = tmp_path / "final.npz"
    code = main(["train", str(net_path), "--solver", str(solver_path), "--weights-out", str(out),
                 "--no-progress"])
    stdout, stderr = capsys.readouterr()
    assert code == 0, stderr
    logged = [line for line in stdout.splitlines() if line.startswith("Iteration")]
    assert [line.split(",")[0] for line in logged] == [f"Iteration {i}" for i in (0, 5, 10, 15)]
    with np.load(out) as weights:
        assert sorted(weights.files) == ["fc1/0", "fc1/1", "fc2/0", "fc2/1"]
        assert weights["fc1/0"].shape == (H, D_IN)


def test_edu_dl_train_reports_bad_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                        ) -> None:
    solver = write(tmp_path / "solver.prototxt", SOLVER.replace("base_lr", "base_learning_rate"))
    code = main(["train", "--solver", str(solver), "--no-progress"])
    _, stderr = capsys.readouterr()
    assert code == 1 and "solver.prototxt:3:" in stderr and "base_learning_rate" in stderr


def test_shipped_example_data_is_reproducible() -> None:
    with np.load(TWO_LAYER_DATA) as shipped:
        made = two_layer_data()
        assert sorted(shipped.files) == sorted(made)
        for key, value in made.items():
            assert np.array_equal(shipped[key], value)


def test_shipped_example_trains(tmp_path: Path) -> None:
    solver = tmp_path / "solver.prototxt"
    text = caffe.TWO_LAYER_SOLVER.read_text(encoding="utf-8")
    write(solver, text.replace('"two_layer_net.prototxt"', f'"{caffe.TWO_LAYER_NET}"')
          .replace("max_iter: 200", "max_iter: 15"))
    history = caffe.train(None, solver, display=0)
    assert len(history.losses) == 15 and history.losses[-1] < 0.5 * history.losses[0]


def test_matches_the_shared_model_spec(tmp_path: Path) -> None:
    """The prototxt twin of models.CAFFE_EUCLIDEAN (no biases) trains like the NumPy twin."""
    from edu_dl.models import spec as models
    from edu_dl.twins import numpy_twin

    spec, steps = models.CAFFE_EUCLIDEAN, 10
    X, Y = spec.make_data()
    np.savez(tmp_path / "train.npz", x=X, y=Y)
    init = spec.init_weights()
    np.savez(tmp_path / "w0.npz", **{"fc1/0": init["w1"].T, "fc2/0": init["w2"].T})  # (out, in)
    write(tmp_path / "net.prototxt", f"""
        layer {{ name: "d" type: "HDF5Data" top: "x" top: "y"
                hdf5_data_param {{ source: "train.npz" batch_size: {spec.N} }} }}
        layer {{ name: "fc1" type: "InnerProduct" bottom: "x" top: "h"
                inner_product_param {{ num_output: {spec.H} bias_term: false }} }}
        layer {{ name: "relu" type: "ReLU" bottom: "h" top: "h" }}
        layer {{ name: "fc2" type: "InnerProduct" bottom: "h" top: "y_hat"
                inner_product_param {{ num_output: {spec.D_out} bias_term: false }} }}
        layer {{ name: "loss" type: "EuclideanLoss" bottom: "y_hat" bottom: "y" top: "l" }}
    """)
    lr = spec.lr("sgd")
    solver = write(tmp_path / "solver.prototxt", f'net: "net.prototxt" base_lr: {lr} '
                   f'lr_policy: "fixed" max_iter: {steps}')
    history = caffe.train(None, solver, weights=tmp_path / "w0.npz", dtype=np.float64, display=0)
    twin = numpy_twin.train(spec, X, Y, steps, f32(lr), "sgd", weights=init)
    assert edu_dl.rel_error(np.array(history.losses), np.array(twin.losses)) < 1e-10
    assert edu_dl.rel_error(history.weights["fc1/0"], twin.weights["w1"].T) < 1e-10


# ---------------------------------------------------------------------------------------------
# An older protobuf, as a hosted service's TensorFlow before 2.20 keeps it

# Stand-ins first on PYTHONPATH: protobuf 5.29.4 (no runtime_version module: the generated code
# could not even be imported) and a TensorFlow 2.19 that, like the real one, refuses protobuf 6+.
OLD_PROTOBUF = '__version__ = "5.29.4"\n'
OLD_TENSORFLOW = '''\
import google.protobuf
__version__ = "2.19.0"
if int(google.protobuf.__version__.split(".")[0]) >= 6:
    raise ImportError("TensorFlow 2.19 needs protobuf below 6")
'''
ON_AN_OLD_PROTOBUF = '''\
import tensorflow
import edu_dl
import edu_dl.caffe as caffe
from edu_dl.cli import main

assert tensorflow.__version__ == "2.19.0"
try:
    main(["validate", "--help"])  # the command line, `train` included, still starts
except SystemExit as done:
    assert done.code == 0
# The reader through the package, the generated module as exercise 13 imports it, a submodule.
for use in ("caffe.build(caffe.TWO_LAYER_NET, caffe.TWO_LAYER_SOLVER)",
            "from edu_dl.caffe import caffe_subset_pb2", "import edu_dl.caffe.net"):
    try:
        exec(use)
    except caffe.ProtobufTooOld as exc:
        print("SAID:", exc)
    else:
        print("NOTHING SAID:", use)
'''


def test_an_older_protobuf_leaves_the_course_working_and_the_reader_says_what_it_needs(
    tmp_path: Path,
) -> None:
    (tmp_path / "google" / "protobuf").mkdir(parents=True)
    (tmp_path / "google" / "__init__.py").write_text("")
    (tmp_path / "google" / "protobuf" / "__init__.py").write_text(OLD_PROTOBUF)
    (tmp_path / "tensorflow").mkdir()
    (tmp_path / "tensorflow" / "__init__.py").write_text(OLD_TENSORFLOW)
    done = subprocess.run([sys.executable, "-c", ON_AN_OLD_PROTOBUF], cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(tmp_path)},
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    said = [line for line in done.stdout.splitlines() if "SAID:" in line]
    assert len(said) == 3 and all(line.startswith("SAID: ") for line in said), done.stdout
    message = said[0].removeprefix("SAID: ")
    assert "protobuf 5.29.4" in message and "pip install 'protobuf>=7.35.1'" in message
    assert message.count(". ") == 0, "one sentence"


@pytest.mark.parametrize(("version", "enough"), [
    ("7.35.1", True), ("7.36.2", True), ("8.0.0", True), ("7.35.0", False), ("5.29.4", False),
    ("7.36.0rc1", True), ("4.25.3", False)])
def test_the_protobuf_check_compares_releases(version: str, enough: bool) -> None:
    if enough:
        caffe.require_protobuf(version)
    else:
        with pytest.raises(caffe.ProtobufTooOld, match=f"protobuf {version}"):
            caffe.require_protobuf(version)


def test_the_lazy_names_are_the_packages_public_names() -> None:
    assert sorted(caffe.__all__) == sorted(caffe._EXPORTS)
    for name in caffe.__all__:
        assert getattr(caffe, name) is not None


def test_the_generated_code_asks_for_the_checked_protobuf() -> None:
    """caffe_subset_pb2.py's header names the runtime it was generated for: the one checked."""
    header = (PROTO.parent / "caffe_subset_pb2.py").read_text().splitlines()[:8]
    line = next(x for x in header if x.startswith("# Protobuf Python Version:"))
    assert line.split(":")[1].strip() == ".".join(map(str, caffe.PROTOBUF_NEEDED))
