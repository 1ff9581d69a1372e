"""The host's load when a benchmark ran: this machine is shared with other developers, so
a result says how busy it was (``load_before``/``load_after`` around the measurement)."""

from __future__ import annotations

import os
from typing import Any


def load_note() -> dict[str, Any]:
    """The CPU count and the 1- and 5-minute load averages."""
    one, five, _ = os.getloadavg()
    return {"cpus": os.cpu_count(), "loadavg_1m": one, "loadavg_5m": five}
