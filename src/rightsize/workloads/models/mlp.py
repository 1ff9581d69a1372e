"""MLP-3: a multi-layer perceptron with three hidden layers.

This is the "MLP-3" workload of the model-packing study (Liu, Krishnan, Elmore
& Franklin, "Understanding and Optimizing Packed Neural Network Training for
Hyper-Parameter Tuning", DEEM@SIGMOD 2021, arXiv:2002.02885): three equally wide
fully connected hidden layers followed by a linear classifier. Inputs of any
trailing shape are flattened, so an 8x8 grey-scale digit (64 features) works
directly. At the defaults (64 -> 256 -> 256 -> 256 -> 10) it has 150,794
parameters.
"""

from __future__ import annotations

import torch
from torch import nn

from ._activations import make_activation


class MLP3(nn.Module):
    """Three hidden ``Linear`` layers (``fc1``..``fc3``) and a ``head``."""

    def __init__(self, in_features: int, num_classes: int, hidden: int, activation: str):
        super().__init__()
        self.flatten = nn.Flatten()
        self.fc1 = nn.Linear(in_features, hidden)
        self.act1 = make_activation(activation)
        self.fc2 = nn.Linear(hidden, hidden)
        self.act2 = make_activation(activation)
        self.fc3 = nn.Linear(hidden, hidden)
        self.act3 = make_activation(activation)
        self.head = nn.Linear(hidden, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.flatten(x)
        x = self.act1(self.fc1(x))
        x = self.act2(self.fc2(x))
        x = self.act3(self.fc3(x))
        return self.head(x)


def mlp3(
    in_features: int = 64,
    num_classes: int = 10,
    hidden: int = 256,
    activation: str = "relu",
) -> MLP3:
    """Build MLP-3. ``activation`` is one of ``relu``, ``tanh``, ``sigmoid``, ``leaky_relu``."""
    return MLP3(in_features, num_classes, hidden, activation)
