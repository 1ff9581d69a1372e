"""Packed hyper-parameter tuning: several trials trained in one process on one device.

Implements Liu, Krishnan, Elmore & Franklin, "Understanding and Optimizing
Packed Neural Network Training for Hyper-Parameter Tuning": the pack primitive
(``pack``: load / pack / free, §2.2-§3.2; ``fused``, ``members``: the fused and
general paths; ``optimizers``: per-trial optimizers, vectorized), the memory a
pack needs (``memory``, §4.5), pack_opt (``packopt``, §5.3-§5.4), and Hyperband
with Packed Hyperband (``hyperband``, §5.1-§5.2; Li et al. Algorithm 1). The
isolation reference, each trial alone with plain PyTorch, is ``alone``;
``runner`` wires a whole search for ``rightsize tune``.
"""
