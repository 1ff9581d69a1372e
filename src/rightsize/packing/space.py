"""The hyper-parameter search space: a YAML file of named value lists (packing paper Table 3).

A space lists, for each hyper-parameter, the values to try::

    batch_size: {from: 20, to: 70, step: 5}     # or a list: [20, 25, 30]
    optimizer: [adam, sgd, adagrad, momentum]
    lr: [0.000001, 0.00001, 0.0001, 0.001, 0.01, 0.1]
    activation: [sigmoid, leaky_relu, tanh, relu]   # a model option of the workload

``batch_size``, ``optimizer`` and ``lr`` are required; any other key must be
an option of the workload's model (``activation``, ``hidden``, ``width``).
Numeric hyper-parameters are kept sorted, because pack_opt measures their
distance by index (§5.3). A configuration is one value per hyper-parameter;
the space enumerates ``product of list lengths`` of them and samples without
replacement.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rightsize.core.errors import SpecError, unknown_name
from rightsize.core.files import read_yaml
from rightsize.core.limits import BATCH
from rightsize.packing.optimizers import OPTIMIZER_KINDS

#: Hyper-parameters every space must list, in display order.
REQUIRED: tuple[str, ...] = ("batch_size", "optimizer", "lr")
#: Values one hyper-parameter may list: 10^4, far more than a search samples (a range of
#: 10^12 values would be materialised before anything runs).
MAX_VALUES = 10**4


@dataclass(frozen=True)
class Config:
    """One configuration: a value per hyper-parameter, in the space's order."""

    items: tuple[tuple[str, Any], ...]

    def __getitem__(self, name: str) -> Any:
        for key, value in self.items:
            if key == name:
                return value
        raise KeyError(name)

    def as_dict(self) -> dict[str, Any]:
        return dict(self.items)

    def label(self) -> str:
        return " ".join(f"{key}={value}" for key, value in self.items)


@dataclass(frozen=True)
class SearchSpace:
    """Named value lists; ``numeric`` names are compared by index distance, the rest 0/1."""

    params: tuple[tuple[str, tuple[Any, ...]], ...]
    numeric: frozenset[str]

    @property
    def names(self) -> list[str]:
        return [name for name, _ in self.params]

    @property
    def size(self) -> int:
        return math.prod(len(values) for _, values in self.params)

    def values(self, name: str) -> tuple[Any, ...]:
        return dict(self.params)[name]

    def model_options(self) -> list[str]:
        return [name for name in self.names if name not in REQUIRED]

    def config(self, flat_index: int) -> Config:
        """The configuration at ``flat_index`` in row-major order over the lists."""
        items = []
        for name, values in reversed(self.params):
            flat_index, position = divmod(flat_index, len(values))
            items.append((name, values[position]))
        return Config(tuple(reversed(items)))

    def indices(self, config: Config) -> tuple[int, ...]:
        """Each value's position in its list (what §5.3's distance is computed on)."""
        return tuple(values.index(config[name]) for name, values in self.params)

    def sample(self, count: int, rng: np.random.Generator) -> list[Config]:
        """``count`` distinct configurations (all of them if the space is smaller)."""
        count = min(count, self.size)
        chosen = rng.choice(self.size, size=count, replace=False)
        return [self.config(int(i)) for i in chosen]

    def __iter__(self) -> Iterator[Config]:
        return (self.config(i) for i in range(self.size))


def load_space(path: str | Path, model_options: Sequence[str] | None) -> SearchSpace:
    """Read a space file.

    Args:
        path: the YAML file.
        model_options: option names of the workload's model (allowed as extra keys);
            None accepts any (a user's factory checks its own options when called).

    Raises:
        SpecError: unreadable file, unknown or missing hyper-parameter, an empty
            list, a duplicate, or a value of the wrong type.
    """
    return parse_space(read_yaml(path, "space"), model_options, f"space {path}")


def parse_space(
    data: Any, model_options: Sequence[str] | None, label: str = "space"
) -> SearchSpace:
    """Validate an already-parsed space mapping (see :func:`load_space`)."""
    if not isinstance(data, dict) or not data:
        raise SpecError(f"{label}: expected a mapping of hyper-parameter: [values]")
    known = [*REQUIRED, *(model_options or [])]
    for name in data:
        if model_options is not None and name not in known:
            raise SpecError(f"{label}: {unknown_name('hyper-parameter', str(name), known)}")
    for name in REQUIRED:
        if name not in data:
            raise SpecError(
                f"{label}: {name} is missing; list the values to try, e.g. {name}: [...]"
            )
    params, numeric = [], set()
    for name in [*REQUIRED, *(n for n in data if n not in REQUIRED)]:
        values = _checked_values(name, _expand(data[name], name, label), label)
        if all(_is_number(v) for v in values):
            values = tuple(sorted(values))
            numeric.add(name)
        params.append((name, values))
    return SearchSpace(tuple(params), frozenset(numeric))


def _expand(raw: Any, name: str, label: str) -> list[Any]:
    """A list as given, or ``{from, to, step}`` as the inclusive arithmetic range."""
    if isinstance(raw, dict):
        if set(raw) != {"from", "to", "step"}:
            raise SpecError(f"{label}: {name}: a range needs exactly from, to and step")
        start, stop, step = (_number(raw[k], name, label) for k in ("from", "to", "step"))
        if step <= 0 or stop < start:
            raise SpecError(f"{label}: {name}: a range needs step > 0 and to >= from")
        count = int(math.floor((stop - start) / step + 1e-9)) + 1
        if count > MAX_VALUES:
            raise SpecError(
                f"{label}: {name}: the range from {start:g} to {stop:g} by {step:g} has "
                f"{count:,} values; a hyper-parameter may list at most {MAX_VALUES:,} "
                "(raise step)"
            )
        return [_tidy(start + i * step) for i in range(count)]
    if not isinstance(raw, list):
        raise SpecError(f"{label}: {name}: expected a list of values or {{from, to, step}}")
    if len(raw) > MAX_VALUES:
        raise SpecError(f"{label}: {name} lists {len(raw):,} values; at most {MAX_VALUES:,}")
    return list(raw)


def _checked_values(name: str, values: list[Any], label: str) -> tuple[Any, ...]:
    if not values:
        raise SpecError(f"{label}: {name} is an empty list; give at least one value")
    if name == "batch_size":
        values = [_batch(v, label) for v in values]
    elif name == "lr":
        values = [_learning_rate(v, label) for v in values]
    elif name == "optimizer":
        values = [_optimizer(v, label) for v in values]
    seen = set()
    for value in values:
        if value in seen:
            raise SpecError(f"{label}: {name} lists {value!r} twice")
        seen.add(value)
    return tuple(values)


def _batch(value: Any, label: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise SpecError(f"{label}: batch_size {value!r} must be a whole number >= 1")
    return BATCH.check(value, f"{label}: batch_size")


def _learning_rate(value: Any, label: str) -> float:
    rate = _number(value, "lr", label)
    if not rate > 0:
        raise SpecError(f"{label}: lr {value!r} must be > 0")
    return rate


def _optimizer(value: Any, label: str) -> str:
    if value not in OPTIMIZER_KINDS:
        raise SpecError(f"{label}: {unknown_name('optimizer', str(value), OPTIMIZER_KINDS)}")
    return value


def _number(value: Any, name: str, label: str) -> float:
    # YAML 1.1 reads "1e-6" (no dot) as a string; accept it as the number it means
    try:
        number = float(value) if not isinstance(value, bool) else math.nan
    except (TypeError, ValueError):
        number = math.nan
    if not math.isfinite(number):
        raise SpecError(f"{label}: {name} value {value!r} is not a number")
    return _tidy(number)


def _tidy(number: float) -> int | float:
    return int(number) if float(number).is_integer() and abs(number) >= 1 else number


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
