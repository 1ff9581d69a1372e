"""rightsize: plan, run and right-size resources for deep-learning training."""

__version__ = "0.1.0"
