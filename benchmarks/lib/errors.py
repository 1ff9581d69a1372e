"""The error measures benchmark results quote, each computed one way."""

from __future__ import annotations

import statistics
from collections.abc import Iterable


def mape_percent(predicted: Iterable[float], measured: Iterable[float]) -> float:
    """Mean absolute percentage error of ``predicted`` against ``measured``, pairwise."""
    return 100 * statistics.fmean(
        abs(float(p) - float(m)) / float(m) for p, m in zip(predicted, measured, strict=True)
    )


def rows_mape(rows: list[dict], predicted: str, measured: str = "measured_s") -> float:
    """``mape_percent`` of the rows' ``predicted`` field against their ``measured`` field."""
    return mape_percent([r[predicted] for r in rows], [r[measured] for r in rows])


def relative_error_percent(predicted: float | None, measured: float | None) -> float | None:
    """``predicted`` against ``measured``, signed, in percent (None when either is missing)."""
    return 100 * (predicted / measured - 1) if predicted is not None and measured else None


def coefficient_of_variation(values: list[float]) -> float:
    """Spread relative to the mean (0 for fewer than two values)."""
    return statistics.pstdev(values) / statistics.fmean(values) if len(values) > 1 else 0.0
