"""Parsing and checking of argument values shared by several commands.

Every number a flag takes is checked against a :class:`~rightsize.core.limits.Bound`
while the arguments are parsed (:func:`bounded`), so a bad value is refused before a
command starts any work; flags that only mean something together are checked by
:func:`require_together`, :func:`forbid_together` and :func:`ignored_unless`: a flag that
would be silently ignored is an error.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

import yaml

from rightsize.core.errors import SpecError
from rightsize.core.files import yaml_error_text
from rightsize.core.limits import BATCH, Bound


def bounded(bound: Bound) -> Callable[[str], int | float]:
    """An argparse ``type`` reading a number within ``bound``.

    argparse prefixes its message with the flag: ``argument --iterations: '1e30' is not a
    whole number from 1 to 10^9``.
    """

    def parse(text: str) -> int | float:
        try:
            value = int(text) if bound.integer else float(text)
        except ValueError:
            value = None
        if value is None or not bound.accepts(value):
            why = f" ({bound.why})" if bound.why else ""
            raise argparse.ArgumentTypeError(f"{text!r} is not {bound.rule()}{why}")
        return value

    return parse


def parse_options(pairs: list[str], flag: str = "--option") -> dict:
    """``["activation=tanh", "hidden=512"]`` -> ``{"activation": "tanh", "hidden": 512}``."""
    options = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise SpecError(f"{flag} {pair!r} must look like KEY=VALUE")
        try:
            options[key.strip()] = yaml.safe_load(value)
        except yaml.YAMLError as exc:
            raise SpecError(
                f"{flag} {pair!r}: the value is not valid YAML ({yaml_error_text(exc)})"
            ) from None
    return options


def parse_count_list(
    text: str, flag: str, noun: str = "batch sizes", bound: Bound = BATCH
) -> list[int]:
    """``"1,8,64"`` -> ``[1, 8, 64]``; every entry a whole number within ``bound`` (``noun``:
    what they count, for the error message)."""
    try:
        counts = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise SpecError(f"{flag} {text!r} must be comma-separated whole numbers") from None
    if any(c < 1 for c in counts):
        raise SpecError(f"{flag} {text!r}: {noun} must be >= 1")
    for count in counts:
        if not bound.accepts(count):
            raise SpecError(f"{flag} {text!r}: {noun} must be {bound.rule()}, got {count}")
    return counts


def forbid_together(args: argparse.Namespace, first: str, others: list[str], why: str) -> None:
    """``--first`` with any of ``others`` set is an error: one of them would be ignored."""
    if not _given(args, first):
        return
    for other in others:
        if _given(args, other):
            raise SpecError(f"give {_flag(first)} or {_flag(other)}, not both ({why})")


def require_together(args: argparse.Namespace, needs: str, needed: str, why: str) -> None:
    """``--needs`` without ``--needed`` is an error: it would be ignored."""
    if _given(args, needs) and not _given(args, needed):
        raise SpecError(f"{_flag(needs)} needs {_flag(needed)} ({why})")


def ignored_unless(args: argparse.Namespace, dests: tuple[str, ...], read: bool, when: str) -> None:
    """Flags that are only read ``when`` (e.g. "with --strategy ps") are errors otherwise."""
    for dest in dests:
        if not read and _given(args, dest):
            raise SpecError(f"{_flag(dest)} is only read {when}; add that or drop {_flag(dest)}")


def _given(args: argparse.Namespace, dest: str) -> bool:
    # flags checked here default to None/False/[] so that "given" means "typed by the user"
    value = getattr(args, dest)
    return value not in (None, False, [], "")


def _flag(dest: str) -> str:
    return "--" + dest.replace("_", "-")
