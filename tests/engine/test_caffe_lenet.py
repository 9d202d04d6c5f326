"""Caffe's Convolution and Pooling layers, and the shipped LeNet on 8x8 digits.

The LeNet trains by ``edu-dl train`` and, step by step, gives the losses and weights of the same
net written in PyTorch (float64) and updated by Caffe's SGD formula.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np
import pytest
from fixtures.frameworks import F, torch

import edu_dl
from edu_dl import caffe
from edu_dl.caffe.examples import DIGITS_DATA, digits_data
from edu_dl.cli import main


def write(path: Path, text: str) -> Path:
    path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return path


# --------------------------------------------------------------------------- the LeNet


def torch_lenet(w: dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """lenet_digits.prototxt in PyTorch: Caffe rounds pooling windows up (ceil_mode)."""
    h = F.conv2d(x, w["conv1/0"], w["conv1/1"], padding=1)
    h = F.max_pool2d(h, 2, 2, ceil_mode=True)
    h = F.conv2d(h, w["conv2/0"], w["conv2/1"], padding=1)
    h = F.max_pool2d(h, 2, 2, ceil_mode=True)
    h = F.relu(F.linear(h.reshape(h.shape[0], -1), w["ip1/0"], w["ip1/1"]))
    logits = F.linear(h, w["ip2/0"], w["ip2/1"])
    return F.cross_entropy(logits, y)  # SoftmaxWithLoss, normalization VALID: the batch mean


def test_lenet_matches_pytorch_at_every_step() -> None:
    steps = 32  # past the end of the 1797 digits (28 batches of 64): the batches wrap around
    net, solver = caffe.build(None, caffe.LENET_SOLVER, dtype=np.float64)
    s = solver.solver
    assert (s.lr_policy, s.weight_decay > 0, s.momentum > 0) == ("inv", True, True)
    lr_mult = {p.name: p.lr_mult for p in net.params}
    assert lr_mult["conv1/1"] == 2  # LeNet's biases learn twice as fast: the test must see it
    w = {name: torch.tensor(a, requires_grad=True) for name, a in net.weights().items()}
    history = {name: torch.zeros_like(t) for name, t in w.items()}
    data = digits_data()
    X, Y = torch.tensor(data["x"], dtype=torch.float64), torch.tensor(data["y"]).long()
    for it in range(steps):
        loss = solver.step()
        rows = (it * 64 + torch.arange(64)) % len(Y)
        tloss = torch_lenet(w, X[rows], Y[rows])
        for t in w.values():
            t.grad = None
        tloss.backward()
        rate = caffe.learning_rate(s, it)
        with torch.no_grad():  # Caffe's SGD: v = momentum v + lr lr_mult (g + decay w); w -= v
            for name, t in w.items():
                g = t.grad + s.weight_decay * t
                history[name] = s.momentum * history[name] + rate * lr_mult[name] * g
                t -= history[name]
        assert loss == pytest.approx(tloss.item(), rel=1e-12), f"loss at step {it}"
        for name, a in net.weights().items():
            assert edu_dl.rel_error(a, w[name].detach().numpy()) < 1e-10, f"{name}, step {it}"


@pytest.mark.slow  # 2 s or more: make test-fast leaves it to make test
def test_edu_dl_train_example_lenet_learns_the_digits(tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "lenet.npz"
    code = main(["train", "--example", "lenet", "--no-progress", "--weights-out", str(out)])
    stdout, _ = capsys.readouterr()
    assert code == 0
    assert "Iteration 0," in stdout and "Iteration 450," in stdout
    first, last = (float(v) for v in stdout.split("loss ")[-1].split(" -> "))
    assert first > 2.0 and last < 0.3  # ln 10 = 2.3 at the start
    with np.load(out) as weights:
        assert weights["conv1/0"].shape == (8, 1, 3, 3)
        assert weights["conv2/0"].shape == (16, 8, 3, 3)
        assert weights["ip1/0"].shape == (64, 16 * 2 * 2) and weights["ip2/1"].shape == (10,)


def test_shipped_digits_are_sklearns() -> None:
    with np.load(DIGITS_DATA) as shipped:
        made = digits_data()
        assert sorted(shipped.files) == sorted(made)
        for key, value in made.items():
            assert shipped[key].dtype == value.dtype and np.array_equal(shipped[key], value)
    assert made["x"].shape == (1797, 1, 8, 8) and made["x"].max() == 1.0


# --------------------------------------------------------------------------- the layers

DATA = """
layer {{ name: "data" type: "HDF5Data" top: "x" top: "y"
        hdf5_data_param {{ source: "data.npz" batch_size: 2 }} }}
{layers}
layer {{ name: "ip" type: "InnerProduct" bottom: "{last}" top: "z"
        inner_product_param {{ num_output: 3 }} }}
layer {{ name: "loss" type: "SoftmaxWithLoss" bottom: "z" bottom: "y" top: "loss" }}
"""


def net_of(tmp_path: Path, layers: str, last: str, shape: tuple[int, ...] = (2, 3, 8, 8)
           ) -> caffe.Net:
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "data.npz", x=rng.standard_normal(shape), y=np.array([0.0, 2.0]))
    write(tmp_path / "net.prototxt", DATA.format(layers=layers, last=last))
    write(tmp_path / "solver.prototxt", 'net: "net.prototxt" base_lr: 0.1 lr_policy: "fixed" '
          'max_iter: 1 random_seed: 0')
    net, _ = caffe.build(None, tmp_path / "solver.prototxt", dtype=np.float64)
    return net


def blobs_of(net: caffe.Net) -> dict[str, np.ndarray]:
    _, blobs = net.forward()
    return {name: t.numpy() for name, t in blobs.items()}


def test_convolution_fields_as_caffe_reads_them(tmp_path: Path) -> None:
    """pad and stride per axis, kernel_h/kernel_w, gaussian weights, constant bias, bias_term."""
    net = net_of(tmp_path, """
        layer { name: "c1" type: "Convolution" bottom: "x" top: "c1"
                convolution_param { num_output: 4 kernel_h: 3 kernel_w: 2 pad: 1 pad: 0
                                    stride: 2 stride: 1 weight_filler { type: "gaussian" }
                                    bias_filler { type: "constant" value: 0.5 } } }
        layer { name: "c2" type: "Convolution" bottom: "c1" top: "c2"
                convolution_param { num_output: 2 kernel_size: 2 pad_h: 1 stride_w: 2
                                    stride_h: 1 bias_term: false
                                    weight_filler { type: "xavier" } } }
    """, "c2")
    w = net.weights()
    assert w["c1/0"].shape == (4, 3, 3, 2) and np.all(w["c1/1"] == 0.5) and "c2/1" not in w
    blobs = blobs_of(net)
    x = torch.tensor(blobs["x"])
    c1 = F.conv2d(x, torch.tensor(w["c1/0"]), torch.tensor(w["c1/1"]), stride=(2, 1),
                  padding=(1, 0))
    c2 = F.conv2d(c1, torch.tensor(w["c2/0"]), stride=(1, 2), padding=(1, 0))
    np.testing.assert_allclose(blobs["c1"], c1.numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(blobs["c2"], c2.numpy(), rtol=1e-12, atol=1e-12)


def test_pooling_rounds_up_as_caffe(tmp_path: Path) -> None:
    """A 3x3 window with stride 2 on 8x8: Caffe (and ceil_mode) count 4 windows, floor 3; the
    stride is 1 unless given, unlike PyTorch's default."""
    net = net_of(tmp_path, """
        layer { name: "p1" type: "Pooling" bottom: "x" top: "p1"
                pooling_param { pool: MAX kernel_size: 3 stride: 2 pad: 1 } }
        layer { name: "p2" type: "Pooling" bottom: "p1" top: "p2"
                pooling_param { kernel_size: 2 } }
        layer { name: "p3" type: "Pooling" bottom: "p2" top: "p3"
                pooling_param { global_pooling: true } }
    """, "p3")
    blobs = blobs_of(net)
    p1 = F.max_pool2d(torch.tensor(blobs["x"]), 3, 2, 1, ceil_mode=True)
    p2 = F.max_pool2d(p1, 2, 1, ceil_mode=True)
    assert blobs["p1"].shape == (2, 3, 5, 5) and blobs["p2"].shape == (2, 3, 4, 4)
    np.testing.assert_array_equal(blobs["p1"], p1.numpy())
    np.testing.assert_array_equal(blobs["p2"], p2.numpy())
    np.testing.assert_array_equal(blobs["p3"], p2.amax(dim=(2, 3), keepdim=True).numpy())


def error_of(tmp_path: Path, layer: str, shape: tuple[int, ...] = (2, 3, 8, 8)) -> str:
    with pytest.raises(caffe.CaffeFormatError) as info:
        net_of(tmp_path, layer, "t", shape)
    return str(info.value)


@pytest.mark.parametrize(("layer", "words"), [
    ('type: "Convolution" convolution_param { num_output: 4 kernel_size: 3 group: 2 }',
     ["convolution_param.group: 2", "group: 1"]),
    ('type: "Pooling" pooling_param { pool: STOCHASTIC kernel_size: 2 }',
     ["pooling_param.pool: STOCHASTIC is not supported", "pool: MAX"]),
    ('type: "Pooling" pooling_param { pool: AVE kernel_size: 2 }', ["pool: AVE"]),
    ('type: "Convolution" convolution_param { num_output: 4 }',
     ["convolution_param needs kernel_size (or kernel_h and kernel_w)"]),
    ('type: "Convolution" convolution_param { kernel_size: 3 }', ["num_output"]),
    ('type: "Convolution" convolution_param { num_output: 4 kernel_size: 3 kernel_h: 3 }',
     ["give kernel_size or kernel_h and kernel_w, not both"]),
    ('type: "Convolution" convolution_param { num_output: 4 kernel_size: 3 stride: 1 stride: 1 '
     'stride: 1 }', ["convolution_param.stride has 3 values"]),
    ('type: "Convolution" convolution_param { num_output: 4 kernel_size: 3 stride: 0 }',
     ["convolution_param.stride must be positive"]),
    ('type: "Convolution" convolution_param { num_output: 4 kernel_size: 9 }',
     ["conv2d: a 9x9 kernel does not fit", "8x8 after padding"]),
    ('type: "Pooling" pooling_param { kernel_size: 2 pad: 2 }',
     ["max_pool2d: padding must lie in [0, kernel_size)"]),
    ('type: "Pooling" pooling_param { global_pooling: true kernel_size: 2 }',
     ["global_pooling takes the whole image"]),
])
def test_unsupported_or_impossible_layers_name_the_layer_and_field(tmp_path: Path, layer: str,
                                                                   words: list[str]) -> None:
    message = error_of(tmp_path, f'layer {{ name: "t" {layer} bottom: "x" top: "t" }}')
    assert "net.prototxt:3: layer 't'" in message
    for word in words:
        assert word in message


def test_caffe_fields_edu_dl_lacks_are_parse_errors(tmp_path: Path) -> None:
    message = error_of(tmp_path, """layer { name: "t" type: "Convolution" bottom: "x" top: "t"
        convolution_param { num_output: 4 kernel_size: 3 dilation: 2 } }""")
    assert "net.prototxt:4:" in message and "dilation" in message


def test_convolution_needs_an_image_bottom(tmp_path: Path) -> None:
    message = error_of(tmp_path, """layer { name: "t" type: "Convolution" bottom: "x" top: "t"
        convolution_param { num_output: 4 kernel_size: 1 } }""", shape=(2, 5))
    assert "layer 't': needs a bottom of shape (N, C, H, W), got (2, 5)" in message
