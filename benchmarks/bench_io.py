"""What every benchmark script shares: writing its JSON report and the error measure it quotes.

Benchmarks run as scripts (``python benchmarks/X.py``), so this module is found
next to them on ``sys.path``.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from rightsize.core.files import atomic_write_text


def write_report(out: str | Path, report: dict, indent: int = 2) -> Path:
    """Write ``report`` as indented JSON, atomically (a benchmark stopped midway leaves the
    previous results whole), creating the folder."""
    return atomic_write_text(out, json.dumps(report, indent=indent) + "\n")


def mape_percent(rows: list[dict], predicted: str, measured: str = "measured_s") -> float:
    """Mean absolute percentage error of ``rows[predicted]`` against ``rows[measured]``."""
    return 100 * statistics.fmean(abs(r[predicted] - r[measured]) / r[measured] for r in rows)
