"""Building a policy's parameter dataclass from the paper's defaults and named overrides."""

from __future__ import annotations

import math
from dataclasses import fields, replace
from typing import Any, TypeVar

P = TypeVar("P")


def with_overrides(cls: type[P], base: P | None, overrides: dict[str, Any]) -> P:
    """``base`` (default: ``cls()``, the paper's values) with some fields replaced by name.

    Raises:
        TypeError: an unknown field name, or a value not of the default's kind (a string, NaN
            or infinity for a number); the policy registry turns it into a SpecError.
    """
    known = {f.name for f in fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise TypeError(f"unexpected parameter {unknown[0]!r}; known: {', '.join(sorted(known))}")
    base = base if base is not None else cls()
    for name, value in overrides.items():
        _check_kind(name, value, getattr(base, name))
    return replace(base, **overrides)  # type: ignore[type-var]


def _check_kind(name: str, value: Any, default: Any) -> None:
    """A number where the paper's default is a number (finite: a NaN threshold silently
    disables a comparison), a boolean where it is a boolean."""
    if isinstance(default, bool):
        if not isinstance(value, bool):
            raise TypeError(f"parameter {name} {value!r} must be true or false")
    elif isinstance(default, (int, float)):
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        if not number or not math.isfinite(value):
            raise TypeError(f"parameter {name} {value!r} must be a finite number, like {default}")
        if isinstance(default, int) and not isinstance(value, int):
            raise TypeError(f"parameter {name} {value!r} must be a whole number, like {default}")
