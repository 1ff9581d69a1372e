"""The workload registry: zoo models by name, and users' factories by ``package.module:function``.

A zoo model is paired with a dataset (its default, or one the user names) whose
shape it adapts to: image models take the channels and classes, text models the
vocabulary, click models the feature layout. Model options (``activation=tanh``)
are checked against the builder's signature so a typo is an error, not a
silently ignored setting; their values are checked against the kind of the
builder's default, and the model is built once on PyTorch's ``meta`` device (no
memory, no time) so that a value the model refuses (an unknown activation, a
dropout of 5) or a model too large to train fails here, in one line, before
anything is measured or trained.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from torch import nn

from rightsize.core.errors import SpecError, UnknownNameError, unknown_name
from rightsize.core.limits import COUNT, NON_NEGATIVE, Bound
from rightsize.workloads.datasets import DatasetInfo, builtin_datasets, make_dataset
from rightsize.workloads.workload import (
    Workload,
    classification_loss,
    click_loss,
    count_on_meta,
)

_MODELS = "rightsize.workloads.models"
#: Parameters of one model: 10^10 (40 GB of fp32 weights), far beyond any model one device
#: trains here; a wider "hidden" is a typo that would otherwise fail allocating memory.
MAX_MODEL_PARAMETERS = 10**10


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

    def listing(self) -> dict[str, list[dict[str, Any]]]:
        """The zoo as plain data (``rightsize workloads --json``, the service's forms): each
        model with the data kinds it takes, the datasets that fit and its options; each
        dataset with its kind and default size."""
        datasets = list(self._datasets.values())
        models = [{"name": m.name, "description": m.description, "data": list(m.kinds),
                   "default_dataset": m.default_dataset, "options": m.option_names(),
                   "datasets": [d.name for d in datasets if d.info.kind in m.kinds]}
                  for m in self._models.values()]  # fmt: skip
        return {"models": models, "datasets": [
            {"name": d.name, "kind": d.info.kind, "samples": d.default_samples,
             "description": d.description} for d in datasets]}  # fmt: skip

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
        entry = self._entry(name)
        data = make_dataset(dataset or entry.default_dataset, dataset_size, seed)
        build = self._model(entry, data.name, data.info, options)
        loss = click_loss if data.info.kind == "criteo" else classification_loss
        return Workload(name, data, build, loss, options)

    def _entry(self, name: str) -> ModelEntry:
        if name not in self._models:
            raise unknown_name("workload", name, self._models)
        return self._models[name]

    def _model(
        self, entry: ModelEntry, dataset: str, info: DatasetInfo, options: dict[str, Any]
    ) -> Callable[[], nn.Module]:
        """The model builder for this data and these options, once they are checked."""
        if info.kind not in entry.kinds:
            fitting = [d for d, e in self._datasets.items() if e.info.kind in entry.kinds]
            raise SpecError(
                f"workload {entry.name} takes {'/'.join(entry.kinds)} data but dataset {dataset} "
                f"is {info.kind} data; use one of: {', '.join(fitting)}"
            )
        kwargs = {**entry.derive(info), **self._checked_options(entry, options)}
        builder = entry.builder_fn()
        if options:  # the zoo's defaults are known to build
            _dry_build(entry.name, options, lambda: builder(**kwargs))
        return lambda: builder(**kwargs)

    @staticmethod
    def _checked_options(entry: ModelEntry, options: dict[str, Any]) -> dict[str, Any]:
        allowed = entry.option_names()
        defaults = inspect.signature(entry.builder_fn()).parameters
        for key, value in options.items():
            if key not in allowed:
                known = ", ".join(allowed) or "none"
                raise SpecError(
                    f"workload {entry.name} has no option {key!r}; its options: {known}"
                )
            _check_option(entry.name, key, value, defaults[key].default)
        return options


def _check_option(workload: str, key: str, value: Any, default: Any) -> None:
    """``value`` must be of the default's kind: a flag for a flag, a whole number >= 1 for a
    size, a finite number >= 0 for a rate, text for a name, a list of sizes for layer widths."""
    if isinstance(default, bool):
        ok, rule = isinstance(value, bool), "true or false"
    elif isinstance(default, int):
        ok, rule = COUNT.accepts(value), COUNT.rule()
    elif isinstance(default, float):
        ok, rule = NON_NEGATIVE.accepts(value), NON_NEGATIVE.rule()
    elif isinstance(default, str):
        ok, rule = isinstance(value, str), "text"
    elif isinstance(default, (tuple, list)):
        ok = isinstance(value, (tuple, list)) and bool(value) and all(map(COUNT.accepts, value))
        rule = "a non-empty list of whole numbers >= 1"
    else:
        return
    if not ok:
        raise SpecError(
            f"workload {workload} option {key}={value!r}: must be {rule}, like the default "
            f"{default!r}"
        )


def _dry_build(workload: str, options: dict[str, Any], build: Callable[[], nn.Module]) -> None:
    """Build the model on the ``meta`` device: what the builder refuses, or a model past
    :data:`MAX_MODEL_PARAMETERS`, is the user's error, found without allocating anything."""
    shown = " ".join(f"{k}={v!r}" for k, v in options.items())
    try:
        count = count_on_meta(build).parameters
    except (ValueError, TypeError, RuntimeError, AssertionError, ZeroDivisionError) as exc:
        message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise SpecError(f"workload {workload} cannot be built with {shown}: {message}") from None
    limit = Bound(0, MAX_MODEL_PARAMETERS, why="40 GB of fp32 weights")
    if not limit.accepts(count):
        raise SpecError(
            f"workload {workload} with {shown} has {count:.3g} parameters; a model may have "
            f"at most {MAX_MODEL_PARAMETERS:.0e} ({limit.why}): use smaller options"
        )


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
