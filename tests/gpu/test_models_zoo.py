"""The three ImageNet networks: published parameter counts, layer structure, built on meta."""

from __future__ import annotations

import pytest
from fixtures.frameworks import lazy, torch

# torch.nn and edu_dl.gpu.zoo import torch: loaded when a test first uses them.
nn = lazy("torch.nn")
zoo = lazy("edu_dl.gpu.zoo")
# zoo.MODELS's names, written out so that collecting these tests imports no torch
MODEL_NAMES = ["AlexNet", "VGG-16", "ResNet-50"]


def test_the_model_names_are_the_zoos() -> None:
    assert list(zoo.MODELS) == MODEL_NAMES


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_published_parameter_count(name: str) -> None:
    model = zoo.MODELS[name]()
    assert zoo.parameter_count(model) == zoo.PUBLISHED_PARAMS[name]


def test_the_published_counts_are_the_papers() -> None:
    assert zoo.PUBLISHED_PARAMS == {"AlexNet": 61_100_840, "VGG-16": 138_357_544,
                                    "ResNet-50": 25_557_032}


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_built_on_meta_and_classifies_into_1000(name: str) -> None:
    model = zoo.MODELS[name]()
    assert all(p.device.type == "meta" for p in model.parameters())
    out = model(torch.empty(2, *zoo.IMAGE_SHAPE, device="meta"))
    assert out.shape == (2, 1000) and out.device.type == "meta"


def count(model: nn.Module, kind: type[nn.Module]) -> int:
    return sum(isinstance(m, kind) for m in model.modules())


def test_layer_tables() -> None:
    # VGG-16: 13 convolutions + 3 dense layers; ResNet-50: 1 + 16 * 3 convolutions + 4 projection
    # shortcuts, one dense layer; AlexNet: 5 + 3.
    vgg, resnet, alexnet = zoo.vgg16(), zoo.resnet50(), zoo.alexnet()
    assert (count(vgg, nn.Conv2d), count(vgg, nn.Linear)) == (13, 3)
    assert (count(resnet, nn.Conv2d), count(resnet, nn.Linear)) == (53, 1)
    assert count(resnet, zoo.Bottleneck) == 16
    assert (count(alexnet, nn.Conv2d), count(alexnet, nn.Linear)) == (5, 3)
    assert all(m.kernel_size == (3, 3) for m in vgg.modules() if isinstance(m, nn.Conv2d))


def test_alexnet_feature_map_sizes() -> None:
    shapes = [shape for kind, shape, _ in zoo.output_shapes(zoo.alexnet()) if kind == "Conv2d"]
    assert shapes == [(1, 64, 55, 55), (1, 192, 27, 27), (1, 384, 13, 13), (1, 256, 13, 13),
                      (1, 256, 13, 13)]


def test_output_shapes_add_up_to_the_count() -> None:
    rows = zoo.output_shapes(zoo.vgg16(), batch_size=3)
    assert rows[-1][1] == (3, 1000)
    assert sum(params for *_, params in rows) == zoo.PUBLISHED_PARAMS["VGG-16"]


def test_other_devices_and_classes() -> None:
    model = zoo.alexnet(10, device="cpu")
    assert next(model.parameters()).device.type == "cpu"
    assert model(torch.randn(1, 3, 64, 64)).shape == (1, 10)
    # Only the last layer changes: 4096 * (1000 - 10) weights and 990 biases fewer.
    assert zoo.parameter_count(model) == zoo.PUBLISHED_PARAMS["AlexNet"] - 4097 * 990


def test_resnet_bottleneck_shapes() -> None:
    block = zoo.Bottleneck(256, 128, stride=2)
    out = block(torch.randn(2, 256, 8, 8))
    assert out.shape == (2, 512, 4, 4)
    assert isinstance(block.shortcut, nn.Sequential)
    assert isinstance(zoo.Bottleneck(256, 64).shortcut, nn.Identity)


def test_mlp() -> None:
    model = zoo.mlp([4, 5, 6, 3])
    kinds = [type(m).__name__ for m in model]
    assert kinds == ["Linear", "ReLU", "Linear", "ReLU", "Linear"]
    assert zoo.parameter_count(model) == 4 * 5 + 5 + 5 * 6 + 6 + 6 * 3 + 3
    assert zoo.mlp([2, 2], device="cpu")(torch.ones(1, 2)).shape == (1, 2)
