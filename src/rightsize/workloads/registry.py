"""The workload registry: zoo models by name, and users' factories by ``package.module:function``.

A zoo model is paired with a dataset (its default, or one the user names) whose
shape it adapts to: image models take the channels and classes, text models the
vocabulary, click models the feature layout. Model options (``activation=tanh``)
are checked against the builder's signature so a typo is an error, not a
silently ignored setting.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from torch import nn

from rightsize.core.errors import SpecError, UnknownNameError, unknown_name
from rightsize.workloads.datasets import DatasetInfo, builtin_datasets, make_dataset
from rightsize.workloads.workload import Workload, classification_loss, click_loss

_MODELS = "rightsize.workloads.models"


@dataclass(frozen=True)
class ModelEntry:
    """A zoo model: how to build it for a dataset, and which datasets fit it."""

    name: str
    description: str
    kinds: tuple[str, ...]
    default_dataset: str
    module: str
    builder: str
    derive: Callable[[DatasetInfo], dict[str, Any]]

    def builder_fn(self) -> Callable[..., nn.Module]:
        return getattr(importlib.import_module(f"{_MODELS}.{self.module}"), self.builder)

    def option_names(self) -> list[str]:
        derived = set(self.derive(_EXAMPLE_INFO[self.kinds[0]]))
        params = inspect.signature(self.builder_fn()).parameters
        return [name for name in params if name not in derived]


def _image(info: DatasetInfo) -> dict[str, Any]:
    return {"num_classes": info.num_classes, "in_channels": info.input_shape[0]}


def _flat(info: DatasetInfo) -> dict[str, Any]:
    features = 1
    for size in info.input_shape:
        features *= size
    return {"num_classes": info.num_classes, "in_features": features}


def _tokens(info: DatasetInfo) -> dict[str, Any]:
    return {"vocab_size": info.vocab_size, "block_size": info.input_shape[0]}


def _sequence(info: DatasetInfo) -> dict[str, Any]:
    return {"vocab_size": info.vocab_size, "num_classes": info.num_classes}


def _clicks(info: DatasetInfo) -> dict[str, Any]:
    return {"num_dense": info.num_dense, "cardinalities": info.cardinalities}


_EXAMPLE_INFO = {
    "image": DatasetInfo("image", (3, 32, 32), num_classes=10),
    "tokens": DatasetInfo("tokens", (128,), vocab_size=8192),
    "sequence": DatasetInfo("sequence", (64,), num_classes=2, vocab_size=8192),
    "criteo": DatasetInfo("criteo", num_dense=13, cardinalities=(10,) * 26),
}

ZOO = (
    ModelEntry("mlp3", "MLP with 3 hidden layers (packing paper's MLP-3)", ("image",), "digits", "mlp", "mlp3", _flat),
    ModelEntry("small-cnn", "small CNN without BatchNorm, for packing", ("image",), "synthetic-cifar", "cnn", "small_cnn", _image),
    ModelEntry("resnet18", "ResNet-18 (11.7M params on ImageNet)", ("image",), "synthetic-imagenet", "resnet", "resnet18", _image),
    ModelEntry("resnet18-cifar", "ResNet-18 with a 3x3 stem for 32x32 images (11.2M params)", ("image",), "synthetic-cifar", "resnet", "resnet18_cifar", _image),
    ModelEntry("resnet50", "ResNet-50 (25.6M params on ImageNet)", ("image",), "synthetic-imagenet", "resnet", "resnet50", _image),
    ModelEntry("mobilenetv2", "MobileNetV2 (3.5M params on ImageNet)", ("image",), "synthetic-imagenet", "mobilenet", "mobilenet_v2", _image),
    ModelEntry("densenet121", "DenseNet-121 (8.0M params on ImageNet)", ("image",), "synthetic-imagenet", "densenet", "densenet121", _image),
    ModelEntry("vgg19", "VGG-19 (143.7M params on ImageNet)", ("image",), "synthetic-imagenet", "vgg", "vgg19", _image),
    ModelEntry("gpt-small", "small decoder-only transformer (4 layers, d=256)", ("tokens",), "synthetic-text", "gpt", "gpt_small", _tokens),
    ModelEntry("bilstm", "bidirectional LSTM sequence classifier", ("sequence",), "synthetic-reviews", "lstm", "bilstm_classifier", _sequence),
    ModelEntry("wide-deep", "Wide & Deep click model with embedding tables", ("criteo",), "synthetic-criteo", "recsys", "wide_and_deep", _clicks),
    ModelEntry("deepfm", "DeepFM click model with embedding tables", ("criteo",), "synthetic-criteo", "recsys", "deepfm", _clicks),
)  # fmt: skip


class WorkloadRegistry:
    """Looks up workloads by zoo name or factory path. Pass one where needed; none is global."""

    def __init__(self, models: tuple[ModelEntry, ...] = ZOO) -> None:
        self._models = {entry.name: entry for entry in models}
        self._datasets = builtin_datasets()

    def models(self) -> list[ModelEntry]:
        return list(self._models.values())

    def dataset_names(self) -> list[str]:
        return list(self._datasets)

    def get(
        self,
        name: str,
        dataset: str | None = None,
        options: dict[str, Any] | None = None,
        dataset_size: int | None = None,
        seed: int = 0,
    ) -> Workload:
        """Build a workload.

        Args:
            name: a zoo name (``resnet50``) or ``package.module:function``.
            dataset: a dataset name; default the model's own.
            options: model options, e.g. ``{"activation": "tanh"}``.
            dataset_size: nominal number of samples of a synthetic dataset.
            seed: the dataset's seed.

        Raises:
            UnknownNameError: unknown model or dataset.
            SpecError: incompatible dataset, unknown option, or a factory that fails.
        """
        options = dict(options or {})
        if ":" in name:
            return load_factory(name, options)
        if name not in self._models:
            raise unknown_name("workload", name, self._models)
        entry = self._models[name]
        data = make_dataset(dataset or entry.default_dataset, dataset_size, seed)
        if data.info.kind not in entry.kinds:
            fitting = [d for d, e in self._datasets.items() if e.info.kind in entry.kinds]
            raise SpecError(
                f"workload {name} takes {'/'.join(entry.kinds)} data but dataset {data.name} "
                f"is {data.info.kind} data; use one of: {', '.join(fitting)}"
            )
        kwargs = {**entry.derive(data.info), **self._checked_options(entry, options)}
        builder = entry.builder_fn()
        loss = click_loss if data.info.kind == "criteo" else classification_loss
        return Workload(name, data, lambda: builder(**kwargs), loss, options)

    @staticmethod
    def _checked_options(entry: ModelEntry, options: dict[str, Any]) -> dict[str, Any]:
        allowed = entry.option_names()
        for key in options:
            if key not in allowed:
                known = ", ".join(allowed) or "none"
                raise SpecError(
                    f"workload {entry.name} has no option {key!r}; its options: {known}"
                )
        return options


def load_factory(path: str, options: dict[str, Any] | None = None) -> Workload:
    """Call a user's ``package.module:function`` (with ``options`` as keywords) for a Workload."""
    module_name, _, attr = path.partition(":")
    if not module_name or not attr:
        raise SpecError(f"workload factory {path!r} must look like package.module:function")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise SpecError(f"cannot import {module_name!r} for workload {path!r}: {exc}") from None
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise UnknownNameError(f"module {module_name!r} has no function {attr!r}")
    try:
        inspect.signature(factory).bind(**(options or {}))
    except TypeError as exc:
        raise SpecError(f"workload factory {path!r} does not take these options: {exc}") from None
    workload = factory(**(options or {}))
    if not isinstance(workload, Workload):
        raise SpecError(
            f"workload factory {path!r} returned {type(workload).__name__}; "
            "it must return a rightsize.workloads.Workload"
        )
    return workload
