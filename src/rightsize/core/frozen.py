"""Frozen dataclass instances built without their ``__init__``, for the mechanisms' hot paths.

In core: the scaling contract's types and the core's own values (a cluster shape's totals) use
them. The simulator builds millions of metric samples and an observation per decision
tick; a frozen dataclass's ``__init__`` spends one ``object.__setattr__`` per
field (five times slower than filling the instance's ``__dict__`` at once). The
contract's types stay plain dataclasses: only how the mechanism makes them
changes, and each class built this way is tested to equal the normally built one.
:class:`remembered_property` is the same idea for values computed from them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar

T = TypeVar("T")


def filled(cls: type[T], fields: dict) -> T:
    """An instance of the frozen dataclass ``cls`` whose ``__dict__`` is ``fields`` (every
    field, plus the derived values its ``__post_init__`` would set), made without ``__init__``.

    The caller gives every field, already of its declared type: nothing is validated or
    defaulted. The result equals the normally built object.
    """
    instance = object.__new__(cls)
    object.__setattr__(instance, "__dict__", fields)
    return instance


class remembered_property(Generic[T]):  # noqa: N801 (a decorator, named like cached_property)
    """``functools.cached_property`` without its lock: the value computed on the first read
    and kept in the instance's ``__dict__`` (outside a dataclass's fields, so equality, hash
    and repr ignore it, and :func:`filled` may supply it).

    Python 3.11's ``cached_property`` takes a lock on every first read, which costs more than
    most values it guards here (the simulator's cluster spec and performances), and the
    simulator makes millions of such first reads; 3.12 dropped the lock. Two threads reading
    at once may both compute the value — the same value: it is for pure properties of frozen
    objects. Policies use none (what they read more than once per window is kept by the
    observation book, ``api.Readings``); an observation's headroom and a sample's link
    utilization are such values of the types themselves.
    """

    def __init__(self, func: Callable[[Any], T]) -> None:
        self.func = func
        self.name = func.__name__
        self.__doc__ = func.__doc__

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, instance: Any, owner: type | None = None) -> T:
        if instance is None:
            return self  # type: ignore[return-value]  # the descriptor, read on the class
        value = instance.__dict__[self.name] = self.func(instance)
        return value
