"""Printing results: aligned plain-text tables for people, JSON for programs."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import Any, TextIO


def print_json(data: Any, stream: TextIO | None = None) -> None:
    json.dump(data, stream or sys.stdout, indent=2, default=str)
    (stream or sys.stdout).write("\n")


def format_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Columns padded to their widest cell; numbers right-aligned."""
    cells = [[str(h) for h in headers]] + [
        ["" if c is None else str(c) for c in row] for row in rows
    ]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    numeric = [
        all(_is_number(row[i]) for row in cells[1:]) and len(cells) > 1 for i in range(len(headers))
    ]

    def line(row: list[str]) -> str:
        parts = [
            cell.rjust(width) if is_num else cell.ljust(width)
            for cell, width, is_num in zip(row, widths, numeric, strict=True)
        ]
        return "  ".join(parts).rstrip()

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([line(cells[0]), rule, *(line(row) for row in cells[1:])])


def _is_number(text: str) -> bool:
    try:
        float(text.lstrip("$").rstrip("%").replace(",", ""))
    except ValueError:
        return text in ("", "-")
    return True


def progress_printer(quiet: bool):
    """A progress callback writing to stderr (so stdout stays clean for --json)."""
    if quiet:
        return lambda _message: None

    def emit(message: str) -> None:
        print(f"  {message}", file=sys.stderr, flush=True)

    return emit


def warning_printer(quiet: bool):
    """A warning callback writing ``warning: ...`` to stderr (kept under --json, not --quiet)."""
    if quiet:
        return lambda _message: None

    def emit(message: str) -> None:
        print(f"warning: {message}", file=sys.stderr, flush=True)

    return emit
