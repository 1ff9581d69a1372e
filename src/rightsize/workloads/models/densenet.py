"""DenseNet-121 (Huang, Liu, van der Maaten & Weinberger, "Densely Connected
Convolutional Networks", CVPR 2017), the DenseNet-BC variant used by torchvision.

Growth rate 32, dense blocks of 6-12-24-16 layers, bottleneck width 4x growth,
64 initial features and transitions that halve the channel count. Module names,
layer shapes and initialisation follow ``torchvision.models.densenet121``
(published: 7,978,856 parameters at 1000 classes); the optional memory-efficient
checkpointing of torchvision is not implemented.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class DenseLayer(nn.Module):
    """BN-ReLU-Conv1x1 bottleneck then BN-ReLU-Conv3x3 producing ``growth_rate`` maps."""

    def __init__(self, in_features: int, growth_rate: int, bn_size: int, drop_rate: float):
        super().__init__()
        self.norm1 = nn.BatchNorm2d(in_features)
        self.relu1 = nn.ReLU(inplace=True)
        self.conv1 = nn.Conv2d(
            in_features, bn_size * growth_rate, kernel_size=1, stride=1, bias=False
        )
        self.norm2 = nn.BatchNorm2d(bn_size * growth_rate)
        self.relu2 = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(
            bn_size * growth_rate, growth_rate, kernel_size=3, stride=1, padding=1, bias=False
        )
        self.drop_rate = drop_rate

    def forward(self, features: list[torch.Tensor]) -> torch.Tensor:
        # Concatenate lazily inside the layer so the block can hand over the list
        # of all previous outputs (the "dense" connectivity).
        x = torch.cat(features, 1)
        x = self.conv1(self.relu1(self.norm1(x)))
        x = self.conv2(self.relu2(self.norm2(x)))
        if self.drop_rate > 0:
            x = F.dropout(x, p=self.drop_rate, training=self.training)
        return x


class DenseBlock(nn.ModuleDict):
    """``denselayer1..N``; each sees the concatenation of the input and all earlier outputs."""

    def __init__(
        self, num_layers: int, in_features: int, bn_size: int, growth_rate: int, drop_rate: float
    ):
        super().__init__()
        for i in range(num_layers):
            layer = DenseLayer(in_features + i * growth_rate, growth_rate, bn_size, drop_rate)
            self[f"denselayer{i + 1}"] = layer

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        features = [x]
        for layer in self.values():
            features.append(layer(features))
        return torch.cat(features, 1)


class Transition(nn.Sequential):
    """BN-ReLU-Conv1x1 then 2x2 average pooling between dense blocks."""

    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.norm = nn.BatchNorm2d(in_features)
        self.relu = nn.ReLU(inplace=True)
        self.conv = nn.Conv2d(in_features, out_features, kernel_size=1, stride=1, bias=False)
        self.pool = nn.AvgPool2d(kernel_size=2, stride=2)


class DenseNet(nn.Module):
    """``features`` (stem, dense blocks, transitions, ``norm5``) and ``classifier``."""

    def __init__(
        self,
        growth_rate: int = 32,
        block_config: tuple[int, ...] = (6, 12, 24, 16),
        num_init_features: int = 64,
        bn_size: int = 4,
        drop_rate: float = 0.0,
        num_classes: int = 1000,
        in_channels: int = 3,
    ):
        super().__init__()
        self.features = nn.Sequential()
        self.features.add_module(
            "conv0",
            nn.Conv2d(
                in_channels, num_init_features, kernel_size=7, stride=2, padding=3, bias=False
            ),
        )
        self.features.add_module("norm0", nn.BatchNorm2d(num_init_features))
        self.features.add_module("relu0", nn.ReLU(inplace=True))
        self.features.add_module("pool0", nn.MaxPool2d(kernel_size=3, stride=2, padding=1))

        num_features = num_init_features
        for i, num_layers in enumerate(block_config):
            block = DenseBlock(num_layers, num_features, bn_size, growth_rate, drop_rate)
            self.features.add_module(f"denseblock{i + 1}", block)
            num_features += num_layers * growth_rate
            # No transition after the last block: the classifier follows directly.
            if i != len(block_config) - 1:
                self.features.add_module(
                    f"transition{i + 1}", Transition(num_features, num_features // 2)
                )
                num_features //= 2
        self.features.add_module("norm5", nn.BatchNorm2d(num_features))
        self.classifier = nn.Linear(num_features, num_classes)
        self._init_weights()

    def _init_weights(self) -> None:
        # torchvision's scheme (the classifier weight keeps PyTorch's default init).
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight)
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)
            elif isinstance(m, nn.Linear):
                nn.init.zeros_(m.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.features(x))
        x = torch.flatten(F.adaptive_avg_pool2d(x, (1, 1)), 1)
        return self.classifier(x)


def densenet121(num_classes: int = 1000, in_channels: int = 3) -> DenseNet:
    """DenseNet-121: growth 32, blocks 6-12-24-16 (7,978,856 params at 1000 classes)."""
    return DenseNet(32, (6, 12, 24, 16), 64, num_classes=num_classes, in_channels=in_channels)
