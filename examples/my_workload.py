"""A workload of your own: a file whose function returns a ``rightsize.workloads.Workload``.

``rightsize run`` takes it as ``workload: my_workload:make_workload`` (with this folder
on PYTHONPATH); the service's web pages take the file itself (Submit, "my own file").
Options in the job file become the function's keywords (``options: {hidden: 128}``).
"""

from torch import nn

from rightsize.workloads import Workload
from rightsize.workloads.datasets import make_dataset


def make_workload(hidden: int = 64) -> Workload:
    """A two-layer perceptron on scikit-learn's digits (8x8 images, 10 classes)."""
    data = make_dataset("digits")

    def build() -> nn.Module:
        return nn.Sequential(nn.Flatten(), nn.Linear(64, hidden), nn.ReLU(), nn.Linear(hidden, 10))

    return Workload("my-digits-mlp", data, build, options={"hidden": hidden})
