"""Trainable workloads: the model zoo, datasets, and the registry that pairs them."""

from rightsize.workloads.datasets import Dataset, DatasetInfo, make_dataset
from rightsize.workloads.registry import WorkloadRegistry, load_factory
from rightsize.workloads.workload import Workload

__all__ = ["Dataset", "DatasetInfo", "Workload", "WorkloadRegistry", "load_factory", "make_dataset"]
