"""What the runtime benchmarks share: tiny job specs, running a master in-process, load notes."""

from __future__ import annotations

import os
import statistics
from pathlib import Path
from typing import Any

import yaml

from rightsize.core.spec import JobSpec, parse_job_spec
from rightsize.runtime.master import Master
from rightsize.scaling.api import Policy

#: Samples of a run's first metric intervals left out of medians (start-up, warm caches).
WARMUP_INTERVALS = 2


def job_spec(directory: Path, **fields: Any) -> JobSpec:
    """A PS job with 1 PS and 1 worker; ``fields`` replace top-level keys (runtime is merged)."""
    cpus = os.cpu_count() or 1
    data: dict[str, Any] = {
        "name": "bench",
        "workload": "wide-deep",
        "options": {"embed_dim": 8, "hidden": [64, 32]},
        "dataset": "synthetic-criteo",
        "dataset_size": 100_000,
        "batch_size": 512,
        "steps": 400,
        "strategy": "ps",
        "budget": {"cpu": cpus, "memory": "8Gi"},
        "initial_shape": {
            "ps": {"count": 1, "cpu": 0.5, "memory": "2Gi"},
            "workers": {"count": 1, "cpu": cpus - 0.5, "memory": "2Gi"},
        },
        "checkpoint": {"dir": str(directory / "ckpt"), "interval": "600s"},
        "training": {"optimizer": "adagrad", "lr": 0.05},
        "runtime": {"metric_interval": "2s", "startup_timeout": "300s"},
    }
    runtime = {**data["runtime"], **fields.pop("runtime", {})}
    data.update(fields, runtime=runtime)
    return parse_job_spec(yaml.safe_load(yaml.safe_dump(data)))


def run_job(spec: JobSpec, policy: Policy) -> tuple[Master, dict[str, Any], list[str]]:
    """Run ``spec`` to completion in this process; returns the master, its report, its warnings."""
    warnings: list[str] = []
    master = Master(spec, policy, fresh=True, warn=warnings.append)
    report = master.run()
    return master, report, warnings


def steady(values: list[float]) -> list[float]:
    """The values after the warm-up intervals (all of them if the run was too short)."""
    return values[WARMUP_INTERVALS:] or values


def median_or_none(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def load_note() -> dict[str, Any]:
    """The machine's load when a benchmark ran (it is shared with other developers)."""
    one, five, _ = os.getloadavg()
    return {"cpus": os.cpu_count(), "loadavg_1m": one, "loadavg_5m": five}
