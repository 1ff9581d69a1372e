"""VGG-19 without BatchNorm (Simonyan & Zisserman, "Very Deep Convolutional
Networks for Large-Scale Image Recognition", ICLR 2015, configuration E).

Sixteen 3x3 convolutions in five max-pooled stages, an adaptive 7x7 average
pool (so inputs smaller than 224x224 still reach the 25088-wide classifier) and
the 4096-4096-classes classifier with dropout. Shapes and initialisation match
``torchvision.models.vgg19`` (published: 143,667,240 parameters at 1000
classes). Layers are named after the paper's stages (``conv1_1`` .. ``conv5_4``,
``fc6`` .. ``fc8``) rather than torchvision's indices, because a profiler
reports them by name.
"""

from __future__ import annotations

import torch
from torch import nn

# Output channels of each conv per stage; a max-pool closes every stage.
_VGG19_STAGES: tuple[tuple[int, ...], ...] = (
    (64, 64),
    (128, 128),
    (256, 256, 256, 256),
    (512, 512, 512, 512),
    (512, 512, 512, 512),
)


class VGG(nn.Module):
    """``features`` (conv stages), 7x7 ``avgpool`` and ``classifier`` (fc6..fc8)."""

    def __init__(
        self,
        stages: tuple[tuple[int, ...], ...],
        num_classes: int = 1000,
        in_channels: int = 3,
        dropout: float = 0.5,
    ):
        super().__init__()
        self.features = nn.Sequential()
        channels = in_channels
        for s, widths in enumerate(stages, start=1):
            for i, width in enumerate(widths, start=1):
                self.features.add_module(f"conv{s}_{i}", nn.Conv2d(channels, width, 3, padding=1))
                self.features.add_module(f"relu{s}_{i}", nn.ReLU(inplace=True))
                channels = width
            self.features.add_module(f"pool{s}", nn.MaxPool2d(kernel_size=2, stride=2))
        self.avgpool = nn.AdaptiveAvgPool2d((7, 7))
        self.classifier = nn.Sequential()
        self.classifier.add_module("fc6", nn.Linear(channels * 7 * 7, 4096))
        self.classifier.add_module("relu6", nn.ReLU(inplace=True))
        self.classifier.add_module("drop6", nn.Dropout(p=dropout))
        self.classifier.add_module("fc7", nn.Linear(4096, 4096))
        self.classifier.add_module("relu7", nn.ReLU(inplace=True))
        self.classifier.add_module("drop7", nn.Dropout(p=dropout))
        self.classifier.add_module("fc8", nn.Linear(4096, num_classes))
        self._init_weights()

    def _init_weights(self) -> None:
        # torchvision's scheme: without BatchNorm, the Kaiming init is what lets
        # 19 layers train from scratch at all.
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
                nn.init.zeros_(m.bias)
            elif isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, 0, 0.01)
                nn.init.zeros_(m.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.flatten(self.avgpool(self.features(x)), 1)
        return self.classifier(x)


def vgg19(num_classes: int = 1000, in_channels: int = 3) -> VGG:
    """VGG-19 without BatchNorm (143,667,240 params at 1000 classes)."""
    return VGG(_VGG19_STAGES, num_classes=num_classes, in_channels=in_channels)
