"""The rightsize model zoo, in plain PyTorch (no torchvision, no downloads).

Every builder returns a freshly initialised ``nn.Module``; construction is
deterministic under ``torch.manual_seed``. Selecting models by workload name is
the job of :mod:`rightsize.workloads.registry`, not of this package.
"""

from __future__ import annotations

from ._activations import ACTIVATIONS, make_activation
from .cnn import small_cnn
from .densenet import densenet121
from .gpt import gpt_small
from .lstm import bilstm_classifier
from .mlp import mlp3
from .mobilenet import mobilenet_v2
from .recsys import DEFAULT_CRITEO_CARDINALITIES, deepfm, wide_and_deep
from .resnet import resnet18, resnet18_cifar, resnet50
from .vgg import vgg19

__all__ = [
    "ACTIVATIONS",
    "DEFAULT_CRITEO_CARDINALITIES",
    "bilstm_classifier",
    "deepfm",
    "densenet121",
    "gpt_small",
    "make_activation",
    "mlp3",
    "mobilenet_v2",
    "resnet18",
    "resnet18_cifar",
    "resnet50",
    "small_cnn",
    "vgg19",
    "wide_and_deep",
]
