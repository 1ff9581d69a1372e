"""The one exception hierarchy for errors a user can cause.

Every error a user can trigger (a bad unit, an unknown workload, a malformed
file, impossible constraints) raises a subclass of :class:`RightsizeError` whose
message names the field, the value, the rule and, where possible, what to
change. The CLI prints such an error as one line and exits 2; the API turns it
into a 4xx. Programming errors are not wrapped and stay loud.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from enum import StrEnum
from typing import TypeVar

E = TypeVar("E", bound=StrEnum)


class RightsizeError(Exception):
    """Base class of every user-facing error.

    ``field`` names the input that is wrong (``budget.cpu``, ``workload``), set where the
    error is raised: the CLI prints it before the message and the API turns it into the
    error's location, so nobody recovers it from the message's text.
    """

    def __init__(self, *args: object, field: str | None = None) -> None:
        super().__init__(*args)
        self.field = field

    def __str__(self) -> str:
        text = self._text()
        return f"{self.field}: {text}" if self.field else text

    def _text(self) -> str:
        """The message without the field."""
        return super().__str__()

    @property
    def reason(self) -> str:
        """What is wrong with the field (the message without the field's name)."""
        return self._text()

    def __reduce__(self):  # keep the field across processes (pickle passes only args)
        return (_rebuild, (type(self), self.args, self.field))


def _rebuild(cls: type[RightsizeError], args: tuple, field: str | None) -> RightsizeError:
    return cls(*args, field=field)


class UnitError(RightsizeError, ValueError):
    """A quantity string (cpu, memory, duration, money) could not be parsed."""


class SpecError(RightsizeError, ValueError):
    """A spec file (job YAML, catalog CSV, profile JSON) is malformed."""


class UnknownNameError(RightsizeError, KeyError):
    """A name (workload, dataset, instance type, cloud) is not known."""

    def _text(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class ResourceError(RightsizeError, ValueError):
    """A resource request cannot be met (memory limit too small, budget too low)."""


def unknown_name(kind: str, name: str, known: Iterable[str]) -> UnknownNameError:
    """Build an UnknownNameError that lists a close match, or the known names."""
    known = sorted(known)
    close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
    if close:
        hint = f"did you mean {close[0]!r}?"
    elif len(known) <= 12:
        hint = "choose one of: " + ", ".join(known)
    else:
        hint = f"see the {len(known)} known names with --help or the list command"
    return UnknownNameError(f"unknown {kind} {name!r}; {hint}")


def choose(choices: type[E], value: str, kind: str, field: str | None = None) -> E:
    """``value`` as one of ``choices`` (a ``StrEnum`` of modes); an unknown value is refused
    with "did you mean", never run as some default."""
    try:
        return choices(value)
    except ValueError:
        error = unknown_name(kind, str(value), [str(c) for c in choices])
        error.field = field
        raise error from None
