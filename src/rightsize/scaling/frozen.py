"""Frozen dataclass instances built without their ``__init__``, for the mechanisms' hot paths.

The simulator builds millions of metric samples and an observation per decision
tick; a frozen dataclass's ``__init__`` spends one ``object.__setattr__`` per
field (five times slower than filling the instance's ``__dict__`` at once). The
contract's types stay plain dataclasses: only how the mechanism makes them
changes, and each class built this way is tested to equal the normally built one.
"""

from __future__ import annotations

from typing import TypeVar

T = TypeVar("T")


def filled(cls: type[T], fields: dict) -> T:
    """An instance of the frozen dataclass ``cls`` whose ``__dict__`` is ``fields`` (every
    field, plus any remembered ``cached_property`` values), made without ``__init__``.

    The caller gives every field, already of its declared type: nothing is validated or
    defaulted. The result equals the normally built object.
    """
    instance = object.__new__(cls)
    object.__setattr__(instance, "__dict__", fields)
    return instance
