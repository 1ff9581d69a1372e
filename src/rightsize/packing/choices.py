"""The names ``rightsize tune`` offers, kept apart from the PyTorch code that uses them.

The modules that implement each choice import torch; the command line only
needs the names (for ``--help`` and to check its arguments), so they live here.
"""

from __future__ import annotations

#: Training steps per unit of Hyperband's resource (R = 81 units = 810 steps,
#: about 25 epochs of digits' 1,438 training images at batch 45).
STEPS_PER_UNIT = 10

#: How updates are computed: ``fused`` (torch.optim's fused kernels, one pass per
#: tensor) or ``for-loop`` (torch.optim's default single-tensor implementation on
#: the CPU: the same math, rounded differently, bit-identical to a trial alone
#: with a default ``torch.optim`` optimizer).
IMPLEMENTATIONS: tuple[str, ...] = ("fused", "for-loop")

BATCH_MODES = ("pad", "exact", "bucket", "ragged")
#: How a ragged fused group computes its gradients: ``direct`` (the same kernels
#: called without the autograd engine, :mod:`rightsize.packing.direct`) or ``autograd``.
BACKWARDS = ("direct", "autograd")

#: Search algorithms: Hyperband (Algorithm 1's brackets) or successive halving
#: (its most aggressive bracket alone, the synchronous form of ASHA).
ALGORITHMS: tuple[str, ...] = ("hyperband", "successive-halving")

PACK_STRATEGIES: tuple[str, ...] = ("knn", "random", "batch-size", "none")
DISTANCES: tuple[str, ...] = ("l1", "euclidean")
