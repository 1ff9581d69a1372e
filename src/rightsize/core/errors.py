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


class RightsizeError(Exception):
    """Base class of every user-facing error."""


class UnitError(RightsizeError, ValueError):
    """A quantity string (cpu, memory, duration, money) could not be parsed."""


class SpecError(RightsizeError, ValueError):
    """A spec file (job YAML, catalog CSV, profile JSON) is malformed."""


class UnknownNameError(RightsizeError, KeyError):
    """A name (workload, dataset, instance type, cloud) is not known."""

    def __str__(self) -> str:  # KeyError would quote the message
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
