"""The names ``rightsize tune`` offers, kept apart from the PyTorch code that uses them.

The modules that implement each choice import torch; the command line only
needs the names (for ``--help`` and to check its arguments), so they live here.
"""

from __future__ import annotations

from enum import StrEnum

#: Training steps per unit of Hyperband's resource (R = 81 units = 810 steps,
#: about 25 epochs of digits' 1,438 training images at batch 45).
STEPS_PER_UNIT = 10

#: How updates are computed: ``fused`` (torch.optim's fused kernels, one pass per
#: tensor) or ``for-loop`` (torch.optim's default single-tensor implementation on
#: the CPU: the same math, rounded differently, bit-identical to a trial alone
#: with a default ``torch.optim`` optimizer).
class Implementation(StrEnum):
    FUSED = "fused"
    FOR_LOOP = "for-loop"


#: How trials of different batch sizes share a fused group (``rightsize.packing.pack``):
#: ``pad`` (§3.1.1: the group computes at its largest batch), ``exact`` (each trial's own
#: batch, one group per size), ``bucket`` (groups of near sizes) or ``ragged`` (one group,
#: each trial's own rows).
class BatchMode(StrEnum):
    PAD = "pad"
    EXACT = "exact"
    BUCKET = "bucket"
    RAGGED = "ragged"


#: How a ragged fused group computes its gradients: ``direct`` (the same kernels
#: called without the autograd engine, :mod:`rightsize.packing.direct`) or ``autograd``.
class Backward(StrEnum):
    DIRECT = "direct"
    AUTOGRAD = "autograd"

#: Search algorithms: Hyperband (Algorithm 1's brackets) or successive halving
#: (its most aggressive bracket alone, the synchronous form of ASHA).
class Algorithm(StrEnum):
    HYPERBAND = "hyperband"
    SUCCESSIVE_HALVING = "successive-halving"


ALGORITHMS: tuple[str, ...] = tuple(Algorithm)

#: How pack_opt groups trials (``rightsize.packing.packopt``).
class PackStrategy(StrEnum):
    KNN = "knn"
    RANDOM = "random"
    BATCH_SIZE = "batch-size"
    NONE = "none"


class Distance(StrEnum):
    L1 = "l1"
    EUCLIDEAN = "euclidean"


# The names as the command line lists them (argparse's choices).
IMPLEMENTATIONS: tuple[str, ...] = tuple(Implementation)
BATCH_MODES: tuple[str, ...] = tuple(BatchMode)
BACKWARDS: tuple[str, ...] = tuple(Backward)
PACK_STRATEGIES: tuple[str, ...] = tuple(PackStrategy)
DISTANCES: tuple[str, ...] = tuple(Distance)
