"""Building a policy's parameter dataclass from the paper's defaults and named overrides."""

from __future__ import annotations

from dataclasses import fields, replace
from typing import Any, TypeVar

P = TypeVar("P")


def with_overrides(cls: type[P], base: P | None, overrides: dict[str, Any]) -> P:
    """``base`` (default: ``cls()``, the paper's values) with some fields replaced by name.

    Raises:
        TypeError: an unknown field name (the policy registry turns it into a SpecError).
    """
    known = {f.name for f in fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise TypeError(f"unexpected parameter {unknown[0]!r}; known: {', '.join(sorted(known))}")
    return replace(base if base is not None else cls(), **overrides)  # type: ignore[type-var]
