"""Parsing of argument values shared by several commands."""

from __future__ import annotations

import yaml

from rightsize.core.errors import SpecError


def parse_options(pairs: list[str]) -> dict:
    """``["activation=tanh", "hidden=512"]`` -> ``{"activation": "tanh", "hidden": 512}``."""
    options = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise SpecError(f"--option {pair!r} must look like KEY=VALUE")
        options[key.strip()] = yaml.safe_load(value)
    return options


def parse_count_list(text: str, flag: str, noun: str = "batch sizes") -> list[int]:
    """``"1,8,64"`` -> ``[1, 8, 64]``; every entry a whole number >= 1 (``noun``: what they
    count, for the error message)."""
    try:
        batches = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise SpecError(f"{flag} {text!r} must be comma-separated whole numbers") from None
    if any(b < 1 for b in batches):
        raise SpecError(f"{flag} {text!r}: {noun} must be >= 1")
    return batches
