"""MobileNetV2 (Sandler, Howard, Zhu, Zhmoginov & Chen, "MobileNetV2: Inverted
Residuals and Linear Bottlenecks", CVPR 2018) at width multiplier 1.0.

Layer shapes, dropout and initialisation match ``torchvision.models.mobilenet_v2``
(published: 3,504,872 parameters at 1000 classes). Module names differ from
torchvision's ``features.N.conv.M`` on purpose: a profiler reports these names
as layers, so each block is spelled out as ``expand`` / ``depthwise`` /
``project`` with ``conv`` and ``bn`` children.
"""

from __future__ import annotations

import torch
from torch import nn

# (expansion t, output channels c, repeats n, first stride s) from Table 2 of the paper.
_INVERTED_RESIDUAL_SETTING: tuple[tuple[int, int, int, int], ...] = (
    (1, 16, 1, 1),
    (6, 24, 2, 2),
    (6, 32, 3, 2),
    (6, 64, 4, 2),
    (6, 96, 3, 1),
    (6, 160, 3, 2),
    (6, 320, 1, 1),
)
_STEM_CHANNELS = 32
_LAST_CHANNELS = 1280


class ConvBN(nn.Module):
    """Bias-free convolution + BatchNorm, optionally followed by ReLU6."""

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int = 1,
        stride: int = 1,
        groups: int = 1,
        activation: bool = True,
    ):
        super().__init__()
        self.conv = nn.Conv2d(
            in_channels,
            out_channels,
            kernel_size,
            stride=stride,
            padding=(kernel_size - 1) // 2,
            groups=groups,
            bias=False,
        )
        self.bn = nn.BatchNorm2d(out_channels)
        # ReLU6 is the paper's choice (robust under low-precision inference);
        # the projection has no activation because it is the "linear bottleneck".
        self.act = nn.ReLU6(inplace=True) if activation else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.bn(self.conv(x)))


class InvertedResidual(nn.Module):
    """Expand (1x1) -> depthwise (3x3) -> linear project (1x1), residual when shapes match."""

    def __init__(self, in_channels: int, out_channels: int, stride: int, expand_ratio: int):
        super().__init__()
        hidden = in_channels * expand_ratio
        self.use_residual = stride == 1 and in_channels == out_channels
        # With t=1 the expansion would be an identity-shaped 1x1 conv; the paper
        # (and torchvision) drop it.
        self.expand = ConvBN(in_channels, hidden) if expand_ratio != 1 else None
        self.depthwise = ConvBN(hidden, hidden, kernel_size=3, stride=stride, groups=hidden)
        self.project = ConvBN(hidden, out_channels, activation=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = x if self.expand is None else self.expand(x)
        out = self.project(self.depthwise(out))
        return x + out if self.use_residual else out


class MobileNetV2(nn.Module):
    """``stem``, 17 ``blocks``, ``last_conv``, global pool, ``dropout`` + ``classifier``."""

    def __init__(self, num_classes: int = 1000, in_channels: int = 3, dropout: float = 0.2):
        super().__init__()
        self.stem = ConvBN(in_channels, _STEM_CHANNELS, kernel_size=3, stride=2)
        blocks: list[nn.Module] = []
        channels = _STEM_CHANNELS
        for t, c, n, s in _INVERTED_RESIDUAL_SETTING:
            for i in range(n):
                blocks.append(InvertedResidual(channels, c, s if i == 0 else 1, t))
                channels = c
        self.blocks = nn.Sequential(*blocks)
        self.last_conv = ConvBN(channels, _LAST_CHANNELS)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.dropout = nn.Dropout(p=dropout)
        self.classifier = nn.Linear(_LAST_CHANNELS, num_classes)
        self._init_weights()

    def _init_weights(self) -> None:
        # torchvision's scheme; the small classifier init keeps initial logits near zero.
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)
            elif isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, 0, 0.01)
                nn.init.zeros_(m.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.last_conv(self.blocks(self.stem(x)))
        x = torch.flatten(self.avgpool(x), 1)
        return self.classifier(self.dropout(x))


def mobilenet_v2(num_classes: int = 1000, in_channels: int = 3) -> MobileNetV2:
    """MobileNetV2, width 1.0 (3,504,872 params at 1000 classes)."""
    return MobileNetV2(num_classes=num_classes, in_channels=in_channels)
