"""Exercise 13's part: the oracle agrees with the solution notebook, wrong answers get hints, and
the library's own Net is refused."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import nbformat
import numpy as np
import pytest
from fixtures.exercise_helpers import course_module, run_check, solution_namespace

from edu_dl.grading.trust import source as trusted_source

ex13 = course_module("ex13")
NOTEBOOK = Path(__file__).resolve().parents[2] / "solutions" / "13_caffe_and_the_landscape.ipynb"
run = run_check


def solutions() -> dict[str, Any]:
    """The solution functions of exercise 13 (parse_layer is a helper the solution defines)."""
    return solution_namespace("13_caffe_and_the_landscape.ipynb", also="def parse_layer")


def test_the_part_has_a_solution() -> None:
    assert [p.id for p in ex13.PARTS] == ["ex13.caffe_forward"]
    assert callable(solutions()["caffe_forward"])


def test_caffe_without_transposing_w(capsys: pytest.CaptureFixture[str]) -> None:
    parse_layer = solutions()["parse_layer"]

    def forward(lines, x, y, *params):
        blobs, it = {"x": x, "y": y}, iter(params)
        for line in lines:
            layer = parse_layer(line)
            b = blobs[layer.bottom[0]]
            if layer.type == "InnerProduct":
                W, bias = next(it), next(it)
                blobs[layer.top[0]] = b @ W + bias if W.shape[0] == b.shape[1] else b @ W.T + bias
            elif layer.type == "ReLU":
                blobs[layer.top[0]] = np.maximum(b, 0)
            else:
                return float(np.sum((b - y) ** 2) / (2 * len(b))), b
        return None

    ok, out = run(capsys, "ex13.caffe_forward", forward)
    assert not ok and "case 2 of 3" in out and "params[0] (4, 4)" in out
    # loss and top blob both differ; the hint explains the blob, so the report names it
    assert "output 1" in out and "output 0 (loss)" not in out
    assert "y = x @ W.T + b" in out


def test_caffe_loss_as_a_mean(capsys: pytest.CaptureFixture[str]) -> None:
    right = solutions()["caffe_forward"]

    def forward(lines, x, y, *params):
        _, y_hat = right(lines, x, y, *params)
        return float(np.mean((y_hat - y) ** 2)), y_hat

    ok, out = run(capsys, "ex13.caffe_forward", forward)
    assert not ok and "output 0 (loss)" in out and "sum((y_hat - y)**2) / (2 N)" in out


def test_caffe_by_the_library_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    """edu_dl.caffe's Net gives the right values, but the part asks for the layers by hand."""
    def caffe_forward(lines, x, y, *params):
        from edu_dl.caffe import Net, read_net

        with tempfile.TemporaryDirectory() as tmp:
            np.savez(Path(tmp) / "data.npz", x=x, y=y)
            data = ('layer { name: "data" type: "HDF5Data" top: "x" top: "y" '
                    f'hdf5_data_param {{ source: "data.npz" batch_size: {len(x)} }} }}')
            (Path(tmp) / "net.prototxt").write_text("\n".join([data, *map(str, lines)]))
            net = Net(*read_net(Path(tmp) / "net.prototxt"), Path(tmp), dtype=np.float64)
            for param, value in zip(net.params, params):
                param.tensor.data = np.asarray(value, dtype=np.float64)
            loss, blobs = net.forward()
        (last,) = [layer for layer in net.layers if layer.loss_weight]
        return float(loss.item()), blobs[last.bottom[0]].numpy().copy()

    ok, out = run(capsys, "ex13.caffe_forward", caffe_forward)
    assert not ok
    assert out.startswith("✗ ex13.caffe_forward: the values are right, but this part asks you "
                          "to run the layers yourself")


def test_the_solutions_source_passes() -> None:
    (part,) = ex13.PARTS
    found = trusted_source.find_source(nbformat.read(NOTEBOOK, as_version=4), part.id)
    assert found is not None and part.source_check is not None
    assert part.source_check(found).ok
