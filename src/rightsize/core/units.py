"""Parsing and formatting of the quantities users type: CPU, memory, time, money.

The grammar follows Kubernetes where it has one (``500m`` CPU, ``4Gi`` memory)
and everyday usage elsewhere (``1h30m``, ``$3.50``). Every parser accepts a
plain number as the base unit (cores, bytes, seconds, US dollars), rejects
negative values, and raises :class:`UnitError` naming the field and showing a
valid example.
"""

from __future__ import annotations

import math
import re

from rightsize.core.errors import UnitError

_NUMBER = r"(\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?"

_MEMORY_FACTORS = {
    "": 1,
    "b": 1,
    "k": 10**3, "kb": 10**3, "ki": 2**10, "kib": 2**10,
    "m": 10**6, "mb": 10**6, "mi": 2**20, "mib": 2**20,
    "g": 10**9, "gb": 10**9, "gi": 2**30, "gib": 2**30,
    "t": 10**12, "tb": 10**12, "ti": 2**40, "tib": 2**40,
}  # fmt: skip

_DURATION_FACTORS = {"d": 86400.0, "h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3}


def _number(text: str) -> float | None:
    match = re.fullmatch(_NUMBER, text)
    return float(match.group(0)) if match else None


def _checked(value: float, field: str, raw: object, example: str) -> float:
    if not math.isfinite(value) or value < 0:
        raise UnitError(f"{field} {raw!r}: must be a finite, non-negative quantity, e.g. {example}")
    return value


def _as_text(raw: object) -> str | float:
    if isinstance(raw, bool):
        raise UnitError(f"expected a quantity, got the boolean {raw!r}")
    if isinstance(raw, (int, float)):
        return float(raw)
    if isinstance(raw, str):
        return raw.strip().replace("_", "")
    raise UnitError(f"expected a quantity (a number or a string), got {type(raw).__name__}")


def parse_cpu(raw: object, field: str = "cpu") -> float:
    """Parse CPU cores: ``2``, ``2.5``, ``"500m"`` (millicores).

    Returns:
        Cores as a float.

    Raises:
        UnitError: on anything else or a negative value.
    """
    text = _as_text(raw)
    if isinstance(text, float):
        return _checked(text, field, raw, "2 or 500m")
    millis = text.endswith("m")
    number = _number(text[:-1] if millis else text)
    if number is None:
        raise UnitError(f"{field} {raw!r}: expected cores like 2 or 2.5, or millicores like 500m")
    return _checked(number / 1000 if millis else number, field, raw, "2 or 500m")


def parse_memory(raw: object, field: str = "memory") -> int:
    """Parse a memory size: ``512Mi``, ``4Gi``, ``4GB`` (decimal), or bytes.

    Binary suffixes (Ki, Mi, Gi, Ti, optionally with B) are powers of 1024;
    K, M, G, T with or without B are powers of 1000, as in Kubernetes.

    Returns:
        Bytes, rounded to an integer.
    """
    text = _as_text(raw)
    if isinstance(text, float):
        return int(_checked(text, field, raw, "4Gi"))
    match = re.fullmatch(rf"({_NUMBER})\s*([A-Za-z]*)", text)
    factor = _MEMORY_FACTORS.get(match.group(3).lower()) if match else None
    if match is None or factor is None:
        raise UnitError(
            f"{field} {raw!r}: expected a size like 512Mi, 4Gi or 4GB "
            "(binary Ki/Mi/Gi/Ti, decimal K/M/G/T or KB/MB/GB/TB, or plain bytes)"
        )
    return int(round(_checked(float(match.group(1)) * factor, field, raw, "4Gi")))


def parse_duration(raw: object, field: str = "duration") -> float:
    """Parse a duration: ``90s``, ``45m``, ``2h``, ``1h30m``, ``1d``, or seconds.

    Returns:
        Seconds as a float.
    """
    text = _as_text(raw)
    if isinstance(text, float):
        return _checked(text, field, raw, "1h30m")
    text = text.replace(" ", "").lower()
    parts = re.findall(rf"({_NUMBER})(ms|d|h|m|s)", text)
    if not parts or "".join(p[0] + p[2] for p in parts) != text:
        bare = _number(text)
        if bare is not None:
            return _checked(bare, field, raw, "1h30m")
        raise UnitError(f"{field} {raw!r}: expected a duration like 90s, 45m, 2h or 1h30m")
    seconds = sum(float(number) * _DURATION_FACTORS[unit] for number, _, unit in parts)
    return _checked(seconds, field, raw, "1h30m")


def parse_money(raw: object, field: str = "money") -> float:
    """Parse US dollars: ``$3.50``, ``3.5``, ``$1,200``, ``30 USD``.

    Returns:
        Dollars as a float.
    """
    text = _as_text(raw)
    if isinstance(text, float):
        return _checked(text, field, raw, "$3.50")
    text = text.replace(",", "").replace(" ", "")
    text = re.sub(r"(?i)usd$", "", text).removeprefix("$")
    number = _number(text)
    if number is None:
        raise UnitError(f"{field} {raw!r}: expected US dollars like $3.50 or 30")
    return _checked(number, field, raw, "$3.50")


def format_bytes(n: float) -> str:
    """Format bytes with a binary unit, e.g. ``1.5Gi``."""
    for unit, factor in (("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
        if abs(n) >= factor:
            value = n / factor
            return f"{value:.3g}{unit}" if abs(value) < 1000 else f"{value:.0f}{unit}"
    return f"{n:.0f}B"


def format_duration(seconds: float) -> str:
    """Format seconds compactly, e.g. ``1h30m``, ``42.0s``, ``3.1ms``."""
    if seconds < 1:
        return f"{seconds * 1e3:.3g}ms"
    if seconds < 60:
        return f"{seconds:.3g}s"
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m{secs:02d}s"


def format_money(dollars: float) -> str:
    """Format US dollars, e.g. ``$3.50``; sub-cent amounts keep significant digits."""
    if 0 < abs(dollars) < 0.01:
        return f"${dollars:.3g}"
    return f"${dollars:,.2f}"
