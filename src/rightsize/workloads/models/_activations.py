"""Single place that maps activation names to modules for the zoo's small models.

``mlp3`` and ``small_cnn`` both accept an ``activation`` string; keeping the
lookup here means the allowed names and the error message cannot drift apart.
"""

from __future__ import annotations

from torch import nn

#: Names accepted by :func:`make_activation`, in the order shown in error messages.
ACTIVATIONS: tuple[str, ...] = ("relu", "tanh", "sigmoid", "leaky_relu")

_FACTORIES: dict[str, type[nn.Module]] = {
    "relu": nn.ReLU,
    "tanh": nn.Tanh,
    "sigmoid": nn.Sigmoid,
    "leaky_relu": nn.LeakyReLU,
}


def make_activation(name: str) -> nn.Module:
    """Return a fresh activation module for ``name`` (one of :data:`ACTIVATIONS`)."""
    try:
        factory = _FACTORIES[name]
    except (KeyError, TypeError):
        allowed = ", ".join(repr(a) for a in ACTIVATIONS)
        raise ValueError(f"unknown activation {name!r}; expected one of {allowed}") from None
    return factory()
