"""A bidirectional-LSTM text classifier.

Token embedding, a stacked bidirectional LSTM (Hochreiter & Schmidhuber, "Long
Short-Term Memory", Neural Computation 1997) run in both directions (Schuster &
Paliwal, "Bidirectional Recurrent Neural Networks", IEEE TSP 1997) and a linear
classifier. The sequence is summarised by mean-pooling the
concatenated forward/backward outputs of the top layer over all time steps:
unlike the last hidden states, the mean gives every position a direct gradient
path, and it needs no knowledge of where a sequence ends. No padding mask is
applied, so padded positions count in the mean (inputs are expected to be
fixed-length). At the defaults (vocab 8192, embed 128, hidden 256, 2 layers,
2 classes) it has 3,417,090 parameters.
"""

from __future__ import annotations

import torch
from torch import nn


class BiLSTMClassifier(nn.Module):
    """``embedding`` -> bidirectional ``lstm`` -> mean over time -> ``classifier``."""

    def __init__(
        self,
        vocab_size: int,
        embed_dim: int,
        hidden: int,
        num_layers: int,
        num_classes: int,
        dropout: float = 0.0,
    ):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, embed_dim)
        self.lstm = nn.LSTM(
            embed_dim,
            hidden,
            num_layers=num_layers,
            batch_first=True,
            bidirectional=True,
            dropout=dropout if num_layers > 1 else 0.0,
        )
        self.classifier = nn.Linear(2 * hidden, num_classes)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        """Map token ids ``[N, T]`` to class logits ``[N, num_classes]``."""
        out, _ = self.lstm(self.embedding(idx))  # [N, T, 2 * hidden]
        return self.classifier(out.mean(dim=1))


def bilstm_classifier(
    vocab_size: int = 8192,
    embed_dim: int = 128,
    hidden: int = 256,
    num_layers: int = 2,
    num_classes: int = 2,
) -> BiLSTMClassifier:
    """Build the BiLSTM classifier (3,417,090 params at the defaults)."""
    return BiLSTMClassifier(vocab_size, embed_dim, hidden, num_layers, num_classes)
