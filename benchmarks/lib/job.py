"""A tiny PS job run to completion inside the benchmark's own process, and its samples.

The runtime, PS, service and planning benchmarks all start from the same small wide-deep
job (1 PS, 1 worker on this host's cores) and change only what they measure.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

from rightsize.core.spec import JobSpec, parse_job_spec
from rightsize.runtime.master import Master
from rightsize.scaling.api import Policy


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


def master_samples(master: Master) -> list[dict]:
    """The metric samples a finished job's master recorded in its state file."""
    from rightsize.runtime.state import StateStore

    store = StateStore(master.spec.state_path)
    try:
        return store.samples()
    finally:
        store.close()
