"""A small LeNet/VGG-style convolutional classifier for tiny images.

Two VGG-style stages of two 3x3 convolutions each (LeCun et al., 1998, for the
conv-pool-classifier layout; Simonyan & Zisserman, 2015, for stacked 3x3
convolutions), then a two-layer fully connected classifier. There is
deliberately no BatchNorm: batch statistics couple the samples of a batch, which
would make a trial trained inside a packed (multi-model) batch differ from the
same trial trained alone. An adaptive average pool before the classifier lets
the same weights accept any input of at least 8x8 (CIFAR 32x32, 8x8 digits).
At the defaults (3 input channels, width 32, 10 classes) it has 99,754
parameters.
"""

from __future__ import annotations

import torch
from torch import nn

from ._activations import make_activation

# Spatial size the feature map is pooled to before the classifier; fixed so the
# classifier's shape does not depend on the input resolution.
_POOLED_HW = 2


class SmallCNN(nn.Module):
    """``conv1``..``conv4`` (two stages, max-pooled) then ``fc1`` and ``head``."""

    def __init__(self, in_channels: int, num_classes: int, activation: str, width: int):
        super().__init__()
        wide = 2 * width
        self.conv1 = nn.Conv2d(in_channels, width, kernel_size=3, padding=1)
        self.act1 = make_activation(activation)
        self.conv2 = nn.Conv2d(width, width, kernel_size=3, padding=1)
        self.act2 = make_activation(activation)
        self.pool1 = nn.MaxPool2d(2)
        self.conv3 = nn.Conv2d(width, wide, kernel_size=3, padding=1)
        self.act3 = make_activation(activation)
        self.conv4 = nn.Conv2d(wide, wide, kernel_size=3, padding=1)
        self.act4 = make_activation(activation)
        self.pool2 = nn.MaxPool2d(2)
        self.avgpool = nn.AdaptiveAvgPool2d(_POOLED_HW)
        self.flatten = nn.Flatten()
        self.fc1 = nn.Linear(wide * _POOLED_HW * _POOLED_HW, 128)
        self.act5 = make_activation(activation)
        self.head = nn.Linear(128, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.act2(self.conv2(self.act1(self.conv1(x))))
        x = self.pool1(x)
        x = self.act4(self.conv4(self.act3(self.conv3(x))))
        x = self.pool2(x)
        x = self.flatten(self.avgpool(x))
        return self.head(self.act5(self.fc1(x)))


def small_cnn(
    in_channels: int = 3,
    num_classes: int = 10,
    activation: str = "relu",
    width: int = 32,
) -> SmallCNN:
    """Build the small CNN; ``activation`` is one of ``relu``, ``tanh``, ``sigmoid``,
    ``leaky_relu``."""
    return SmallCNN(in_channels, num_classes, activation, width)
