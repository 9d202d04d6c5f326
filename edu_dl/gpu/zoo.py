"""Three classic ImageNet networks in ``torch.nn``, written from their papers' layer tables.

No weights: nothing is downloaded, and the models are built on PyTorch's ``meta`` device by default
(shapes and dtypes only, no memory), which is all a memory budget needs. Layer for layer they match
torchvision's definitions, so their parameter counts equal the published ones:

- AlexNet: the single-tower variant of Krizhevsky, "One weird trick for parallelizing convolutional
  neural networks" (2014), 64-192-384-256-256 filters; the 2012 paper split 96-256-384-384-256
  filters over two GPUs. 61,100,840 parameters.
- VGG-16: configuration D of Simonyan & Zisserman (2015), Table 1. 138,357,544 parameters.
- ResNet-50: He et al. (2016), Table 1, bottleneck blocks [3, 4, 6, 3], with the stride on the 3x3
  convolution (the "v1.5" that torchvision ships; the count is the same). 25,557,032 parameters.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence

import torch
from torch import nn

Device = str | torch.device

# The counts the papers' tables give (and torchvision reports): what the builders are tested on.
PUBLISHED_PARAMS = {"AlexNet": 61_100_840, "VGG-16": 138_357_544, "ResNet-50": 25_557_032}
IMAGE_SHAPE = (3, 224, 224)  # one ImageNet image, channels first


def alexnet(num_classes: int = 1000, *, device: Device = "meta") -> nn.Sequential:
    """AlexNet, one tower: 5 conv layers (11x11/4, 5x5, 3x3 x3), 3 max-pools, 3 dense layers."""
    with torch.device(device):
        return nn.Sequential(
            nn.Conv2d(3, 64, kernel_size=11, stride=4, padding=2), nn.ReLU(inplace=True),
            nn.MaxPool2d(kernel_size=3, stride=2),
            nn.Conv2d(64, 192, kernel_size=5, padding=2), nn.ReLU(inplace=True),
            nn.MaxPool2d(kernel_size=3, stride=2),
            nn.Conv2d(192, 384, kernel_size=3, padding=1), nn.ReLU(inplace=True),
            nn.Conv2d(384, 256, kernel_size=3, padding=1), nn.ReLU(inplace=True),
            nn.Conv2d(256, 256, kernel_size=3, padding=1), nn.ReLU(inplace=True),
            nn.MaxPool2d(kernel_size=3, stride=2),
            nn.AdaptiveAvgPool2d((6, 6)), nn.Flatten(),
            nn.Dropout(0.5), nn.Linear(256 * 6 * 6, 4096), nn.ReLU(inplace=True),
            nn.Dropout(0.5), nn.Linear(4096, 4096), nn.ReLU(inplace=True),
            nn.Linear(4096, num_classes),
        )


# VGG configuration D: output channels of each 3x3 convolution, "M" a 2x2 max-pool.
VGG16_LAYERS: list[int | str] = [64, 64, "M", 128, 128, "M", 256, 256, 256, "M",
                                 512, 512, 512, "M", 512, 512, 512, "M"]


def vgg16(num_classes: int = 1000, *, device: Device = "meta") -> nn.Sequential:
    """VGG-16 (configuration D): 13 conv 3x3 + ReLU in 5 blocks, then 3 dense layers."""
    layers: list[nn.Module] = []
    with torch.device(device):
        channels = 3
        for item in VGG16_LAYERS:
            if item == "M":
                layers.append(nn.MaxPool2d(kernel_size=2, stride=2))
            else:
                assert isinstance(item, int)
                layers += [nn.Conv2d(channels, item, kernel_size=3, padding=1),
                           nn.ReLU(inplace=True)]
                channels = item
        layers += [nn.AdaptiveAvgPool2d((7, 7)), nn.Flatten(),
                   nn.Linear(512 * 7 * 7, 4096), nn.ReLU(inplace=True), nn.Dropout(0.5),
                   nn.Linear(4096, 4096), nn.ReLU(inplace=True), nn.Dropout(0.5),
                   nn.Linear(4096, num_classes)]
        return nn.Sequential(*layers)


class Bottleneck(nn.Module):
    """y = relu(bn(conv1x1(relu(bn(conv3x3(relu(bn(conv1x1(x))))))) + shortcut(x)), 4x widening."""

    expansion = 4

    def __init__(self, in_channels: int, width: int, stride: int = 1) -> None:
        super().__init__()
        out_channels = width * self.expansion
        self.conv1 = nn.Conv2d(in_channels, width, kernel_size=1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, kernel_size=3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, out_channels, kernel_size=1, bias=False)
        self.bn3 = nn.BatchNorm2d(out_channels)
        self.relu = nn.ReLU(inplace=True)
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or in_channels != out_channels:  # a projection shortcut (option B)
            self.shortcut = nn.Sequential(
                nn.Conv2d(in_channels, out_channels, kernel_size=1, stride=stride, bias=False),
                nn.BatchNorm2d(out_channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + self.shortcut(x))


# ResNet-50's stages (Table 1): (bottleneck width, blocks, stride of the first block).
RESNET50_STAGES = [(64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)]


def resnet50(num_classes: int = 1000, *, device: Device = "meta") -> nn.Sequential:
    """ResNet-50: a 7x7/2 stem and max-pool, 16 bottleneck blocks, global average pool, one FC."""
    with torch.device(device):
        layers: list[nn.Module] = [
            nn.Conv2d(3, 64, kernel_size=7, stride=2, padding=3, bias=False), nn.BatchNorm2d(64),
            nn.ReLU(inplace=True), nn.MaxPool2d(kernel_size=3, stride=2, padding=1)]
        channels = 64
        for width, blocks, stride in RESNET50_STAGES:
            for k in range(blocks):
                layers.append(Bottleneck(channels, width, stride if k == 0 else 1))
                channels = width * Bottleneck.expansion
        layers += [nn.AdaptiveAvgPool2d((1, 1)), nn.Flatten(), nn.Linear(channels, num_classes)]
        return nn.Sequential(*layers)


def mlp(sizes: Sequence[int], *, device: Device = "meta") -> nn.Sequential:
    """Linear(sizes[0], sizes[1]), ReLU, ..., Linear(sizes[-2], sizes[-1]): no ReLU at the end."""
    layers: list[nn.Module] = []
    with torch.device(device):
        for k, (fan_in, fan_out) in enumerate(itertools.pairwise(sizes)):
            if k:
                layers.append(nn.ReLU())
            layers.append(nn.Linear(int(fan_in), int(fan_out)))
    return nn.Sequential(*layers)


MODELS: dict[str, Callable[..., nn.Module]] = {
    "AlexNet": alexnet, "VGG-16": vgg16, "ResNet-50": resnet50}


def parameter_count(model: nn.Module) -> int:
    """Number of trainable values: sum of p.numel() over the parameters."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def output_shapes(model: nn.Sequential, input_shape: tuple[int, ...] = IMAGE_SHAPE,
                  batch_size: int = 1) -> list[tuple[str, tuple[int, ...], int]]:
    """(layer name, output shape, parameters) for each top-level layer, from one forward on the
    model's own device (the meta device: shapes only)."""
    first = next(model.parameters())
    x = torch.empty(batch_size, *input_shape, device=first.device, dtype=first.dtype)
    rows = []
    with torch.no_grad():
        for layer in model:
            x = layer(x)
            rows.append((type(layer).__name__, tuple(x.shape), parameter_count(layer)))
    return rows
