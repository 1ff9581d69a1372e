"""The runtime's own exceptions."""

from __future__ import annotations

from rightsize.core.errors import RightsizeError


class JobFailed(RightsizeError, RuntimeError):
    """The job cannot go on (a node keeps failing, or never starts)."""


class Interrupted(Exception):
    """A node died while an operation waited; the operation is abandoned for recovery."""
