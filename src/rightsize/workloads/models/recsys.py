"""Criteo-shaped click-through-rate models: Wide & Deep and DeepFM.

Wide & Deep (Cheng et al., "Wide & Deep Learning for Recommender Systems", DLRS
2016) adds a linear "wide" model over the raw features to a "deep" MLP over
dense features and learned field embeddings. DeepFM (Guo et al., "DeepFM: A
Factorization-Machine based Neural Network for CTR Prediction", IJCAI 2017)
replaces the wide part's cross features with a factorization machine whose
pairwise interactions share the embeddings fed to the deep MLP. Both take the
Criteo Display Advertising layout, 13 dense (count) features and 26 categorical
fields, and return one logit per sample for ``BCEWithLogitsLoss``. Dense
features are expected already normalised (e.g. ``log1p``); categorical ids must
already be in ``[0, cardinality)`` of their field (hash or remap upstream).

Each field has its own ``nn.Embedding`` table, named after the Criteo column
(``C1`` .. ``C26``), so a profiler and a parameter server see one table per
field. ``sparse=True`` builds the tables with sparse gradients, which only
``torch.optim.SGD``, ``SparseAdam`` and ``Adagrad`` accept.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from rightsize.workloads.datasets import CRITEO_CARDINALITIES

# The table layout of the synthetic-criteo dataset: Criteo Kaggle's fields, hashed to <= 100k rows.
DEFAULT_CRITEO_CARDINALITIES = CRITEO_CARDINALITIES

# Small init keeps the 26-field FM sum and the deep input near unit scale at
# the start; nn.Embedding's default N(0, 1) would make them explode.
_EMBEDDING_INIT_STD = 0.01


class FieldEmbeddings(nn.Module):
    """One embedding table per categorical field; ``[N, F]`` ids -> ``[N, F, dim]``."""

    def __init__(self, cardinalities: Sequence[int], dim: int, sparse: bool = False):
        super().__init__()
        self.tables = nn.ModuleDict(
            {
                f"C{i + 1}": nn.Embedding(card, dim, sparse=sparse)
                for i, card in enumerate(cardinalities)
            }
        )
        for table in self.tables.values():
            nn.init.normal_(table.weight, mean=0.0, std=_EMBEDDING_INIT_STD)

    def forward(self, sparse: torch.Tensor) -> torch.Tensor:
        if sparse.dim() != 2 or sparse.shape[1] != len(self.tables):
            raise ValueError(
                f"expected sparse ids of shape [N, {len(self.tables)}], got {tuple(sparse.shape)}"
            )
        return torch.stack([table(sparse[:, i]) for i, table in enumerate(self.tables.values())], 1)


class LinearPart(nn.Module):
    """First-order term: one scalar weight per category plus a linear map of dense features.

    This is the "wide" component of Wide & Deep and the first-order FM term of DeepFM.
    """

    def __init__(self, num_dense: int, cardinalities: Sequence[int], sparse: bool):
        super().__init__()
        self.embeddings = FieldEmbeddings(cardinalities, 1, sparse=sparse)
        self.dense = nn.Linear(num_dense, 1)

    def forward(self, dense: torch.Tensor, sparse: torch.Tensor) -> torch.Tensor:
        return self.embeddings(sparse).sum(dim=(1, 2)) + self.dense(dense).squeeze(1)


class MLPTower(nn.Module):
    """ReLU MLP ``fc1..fcK`` ending in a single-logit ``out`` layer."""

    def __init__(self, in_features: int, hidden: Sequence[int]):
        super().__init__()
        self.layers = nn.Sequential()
        width = in_features
        for i, h in enumerate(hidden, start=1):
            self.layers.add_module(f"fc{i}", nn.Linear(width, h))
            self.layers.add_module(f"relu{i}", nn.ReLU())
            width = h
        self.layers.add_module("out", nn.Linear(width, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x).squeeze(1)


class _ClickModel(nn.Module):
    """What both click models share: a first-order ``linear`` part over the raw features,
    per-field ``embeddings``, and a ``deep`` MLP over dense features and embeddings."""

    def __init__(
        self,
        num_dense: int,
        cardinalities: Sequence[int],
        embed_dim: int,
        hidden: Sequence[int],
        sparse: bool = False,
    ):
        super().__init__()
        self.linear = LinearPart(num_dense, cardinalities, sparse)
        self.embeddings = FieldEmbeddings(cardinalities, embed_dim, sparse=sparse)
        self.deep = MLPTower(num_dense + len(cardinalities) * embed_dim, hidden)

    def _deep(self, dense: torch.Tensor, emb: torch.Tensor) -> torch.Tensor:
        return self.deep(torch.cat([dense, emb.flatten(1)], dim=1))


class WideAndDeep(_ClickModel):
    """``linear`` (the wide part) + ``deep`` (MLP over dense features and ``embeddings``)."""

    def forward(self, dense: torch.Tensor, sparse: torch.Tensor) -> torch.Tensor:
        """``dense [N, num_dense]`` float, ``sparse [N, fields]`` long -> logits ``[N]``."""
        emb = self.embeddings(sparse)
        return self.linear(dense, sparse) + self._deep(dense, emb)


class DeepFM(_ClickModel):
    """``linear`` (first order) + FM over the shared ``embeddings`` + ``deep`` on the same.

    Dense features join the deep input and the first-order term but not the FM,
    which in the paper is defined over categorical fields only.
    """

    def forward(self, dense: torch.Tensor, sparse: torch.Tensor) -> torch.Tensor:
        """``dense [N, num_dense]`` float, ``sparse [N, fields]`` long -> logits ``[N]``."""
        emb = self.embeddings(sparse)  # [N, F, D]
        # Sum of pairwise dot products in O(F * D): 0.5 * ((sum e)^2 - sum e^2).
        fm = 0.5 * (emb.sum(dim=1).pow(2) - emb.pow(2).sum(dim=1)).sum(dim=1)
        return self.linear(dense, sparse) + fm + self._deep(dense, emb)


def wide_and_deep(
    num_dense: int = 13,
    cardinalities: Sequence[int] = DEFAULT_CRITEO_CARDINALITIES,
    embed_dim: int = 16,
    hidden: Sequence[int] = (256, 128),
    sparse: bool = False,
) -> WideAndDeep:
    """Build Wide & Deep; ``sparse=True`` gives the embedding tables sparse gradients."""
    return WideAndDeep(num_dense, cardinalities, embed_dim, hidden, sparse=sparse)


def deepfm(
    num_dense: int = 13,
    cardinalities: Sequence[int] = DEFAULT_CRITEO_CARDINALITIES,
    embed_dim: int = 16,
    hidden: Sequence[int] = (256, 128),
    sparse: bool = False,
) -> DeepFM:
    """Build DeepFM; ``sparse=True`` gives the embedding tables sparse gradients."""
    return DeepFM(num_dense, cardinalities, embed_dim, hidden, sparse=sparse)
