"""What every benchmark script shares: writing its JSON report and the error measure it quotes.

Benchmarks run as scripts (``python benchmarks/X.py``), so this module is found
next to them on ``sys.path``.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path


def write_report(out: str | Path, report: dict) -> Path:
    """Write ``report`` as indented JSON, creating the folder."""
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2) + "\n")
    return path


def mape_percent(rows: list[dict], predicted: str, measured: str = "measured_s") -> float:
    """Mean absolute percentage error of ``rows[predicted]`` against ``rows[measured]``."""
    return 100 * statistics.fmean(abs(r[predicted] - r[measured]) / r[measured] for r in rows)
