"""Counting a model's tensors as a parameter server holds them (issue 40 item 5).

A PS framework that moves every variable as its own RPC (TensorFlow 1.x's gRPC PS,
perf/ps_profiles.py) pays per tensor, so a plan for it needs the model's tensor count, not
only its bytes. Two kinds are counted: the trainable parameters (a worker reads each, and sends
its gradient) and the running statistics of normalisation layers, which training assigns every
step (batch norm's ``running_mean`` and ``running_var``, TensorFlow's ``moving_mean`` and
``moving_variance``). Other buffers are left out: PyTorch's ``num_batches_tracked`` has no
TensorFlow variable beside it, and masks or positional tables are constants no step writes.
"""

from __future__ import annotations

from torch import nn

from rightsize.profiling.profile import TensorCounts

#: The prefix of the buffers training assigns every step (PyTorch's normalisation layers).
STATE_PREFIX = "running_"


def count_tensors(model: nn.Module) -> TensorCounts:
    """The model's trainable parameter tensors and its running-statistics buffers (works on a
    model built on the ``meta`` device: nothing is read but names and flags)."""
    parameters = sum(1 for p in model.parameters() if p.requires_grad)
    state = sum(1 for name, _ in model.named_buffers()
                if name.rpartition(".")[2].startswith(STATE_PREFIX))  # fmt: skip
    return TensorCounts(parameters=parameters, state=state)
