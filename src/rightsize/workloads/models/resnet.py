"""ResNet-18 and ResNet-50 (He, Zhang, Ren & Sun, "Deep Residual Learning for
Image Recognition", CVPR 2016), reimplemented to match torchvision exactly,
and the CIFAR-10 variant of ResNet-18 with a 3x3 stem.

The layer shapes, module names and default initialisation follow
``torchvision.models.resnet``: BasicBlock for ResNet-18, Bottleneck for ResNet-50
with the stride on the 3x3 convolution ("ResNet v1.5"), BatchNorm after every
convolution, Kaiming-normal (fan-out) convolution init. Keeping torchvision's
module names means its ``state_dict`` files load unchanged. Published parameter
counts at 1000 classes: ResNet-18 11,689,512; ResNet-50 25,557,032.
"""

from __future__ import annotations

import torch
from torch import nn


def _conv3x3(in_planes: int, out_planes: int, stride: int = 1) -> nn.Conv2d:
    # Convolutions feed BatchNorm, whose shift makes a conv bias redundant.
    return nn.Conv2d(in_planes, out_planes, kernel_size=3, stride=stride, padding=1, bias=False)


def _conv1x1(in_planes: int, out_planes: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(in_planes, out_planes, kernel_size=1, stride=stride, bias=False)


class BasicBlock(nn.Module):
    """Two 3x3 convolutions with an identity (or projected) shortcut."""

    expansion = 1

    def __init__(self, in_planes: int, planes: int, stride: int = 1, downsample=None):
        super().__init__()
        self.conv1 = _conv3x3(in_planes, planes, stride)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = _conv3x3(planes, planes)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = downsample

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + identity)


class Bottleneck(nn.Module):
    """1x1 reduce, 3x3, 1x1 expand (x4); the stride sits on the 3x3 as in torchvision."""

    expansion = 4

    def __init__(self, in_planes: int, planes: int, stride: int = 1, downsample=None):
        super().__init__()
        self.conv1 = _conv1x1(in_planes, planes)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = _conv3x3(planes, planes, stride)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = _conv1x1(planes, planes * self.expansion)
        self.bn3 = nn.BatchNorm2d(planes * self.expansion)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + identity)


class ResNet(nn.Module):
    """Stem, four residual stages (``layer1``..``layer4``), global pool and ``fc``."""

    def __init__(
        self,
        block: type[BasicBlock] | type[Bottleneck],
        layers: tuple[int, int, int, int],
        num_classes: int = 1000,
        in_channels: int = 3,
        cifar_stem: bool = False,
    ):
        super().__init__()
        self.in_planes = 64
        if cifar_stem:  # 32x32 inputs keep their resolution into layer1
            self.conv1 = _conv3x3(in_channels, 64)
            self.maxpool: nn.Module = nn.Identity()
        else:
            self.conv1 = nn.Conv2d(in_channels, 64, kernel_size=7, stride=2, padding=3, bias=False)
            self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.layer1 = self._make_layer(block, 64, layers[0])
        self.layer2 = self._make_layer(block, 128, layers[1], stride=2)
        self.layer3 = self._make_layer(block, 256, layers[2], stride=2)
        self.layer4 = self._make_layer(block, 512, layers[3], stride=2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(512 * block.expansion, num_classes)
        self._init_weights()

    def _make_layer(self, block, planes: int, blocks: int, stride: int = 1) -> nn.Sequential:
        downsample = None
        # The shortcut needs a projection whenever the block changes the
        # resolution or the channel count, otherwise the sum would not line up.
        if stride != 1 or self.in_planes != planes * block.expansion:
            downsample = nn.Sequential(
                _conv1x1(self.in_planes, planes * block.expansion, stride),
                nn.BatchNorm2d(planes * block.expansion),
            )
        stage = [block(self.in_planes, planes, stride, downsample)]
        self.in_planes = planes * block.expansion
        stage.extend(block(self.in_planes, planes) for _ in range(1, blocks))
        return nn.Sequential(*stage)

    def _init_weights(self) -> None:
        # Same scheme as torchvision so that initial loss curves are comparable;
        # the fc layer keeps PyTorch's default init, as torchvision does.
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        x = torch.flatten(self.avgpool(x), 1)
        return self.fc(x)


def resnet18(num_classes: int = 1000, in_channels: int = 3) -> ResNet:
    """ResNet-18: BasicBlock stages of 2-2-2-2 blocks (11,689,512 params at 1000 classes)."""
    return ResNet(BasicBlock, (2, 2, 2, 2), num_classes=num_classes, in_channels=in_channels)


def resnet18_cifar(num_classes: int = 10, in_channels: int = 3) -> ResNet:
    """ResNet-18 for 32x32 images: a 3x3 stride-1 stem and no max-pool, as in the CIFAR-10
    ResNet-18 that Pollux and Gavel measure (11,173,962 params at 10 classes)."""
    return ResNet(BasicBlock, (2, 2, 2, 2), num_classes, in_channels, cifar_stem=True)


def resnet50(num_classes: int = 1000, in_channels: int = 3) -> ResNet:
    """ResNet-50: Bottleneck stages of 3-4-6-3 blocks (25,557,032 params at 1000 classes)."""
    return ResNet(Bottleneck, (3, 4, 6, 3), num_classes=num_classes, in_channels=in_channels)
