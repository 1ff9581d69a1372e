"""Running one trace under several policies, and turning the results into rows and tables.

Every number here is simulated — produced by ``cluster.jobmodel``'s model of
parameter-server training, not measured on real jobs — and every table says
so. ``multi_job_rows`` gives NEARCHUS §V-B's metrics (average JCT, queueing
and run time, makespan, CPU utilization, restarts); ``single_job_rows`` gives
§V-A's (best speed, JCT, time to 95% of the best speed).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from rightsize.cluster.config import SimConfig
from rightsize.cluster.jobmodel import ClusterSpec
from rightsize.cluster.results import SimResult
from rightsize.cluster.simulator import Simulator
from rightsize.cluster.traces import Trace
from rightsize.core.units import format_duration
from rightsize.scaling.api import Policy

SIMULATED_NOTE = (
    "simulated: rightsize's performance model of parameter-server training "
    "(cluster/jobmodel.py), not measurements of real jobs"
)


def run_policies(
    trace: Trace,
    cluster: ClusterSpec,
    policies: Sequence[Policy],
    config: SimConfig,
    progress: Callable[[str], None] = lambda _m: None,
) -> list[SimResult]:
    """Simulate ``trace`` once per policy, same cluster, same seed."""
    results = []
    for policy in policies:
        progress(f"simulating {trace.name} on cluster {cluster.name} with {policy.name}")
        results.append(Simulator(cluster, policy, config).run(trace))
    return results


def _change(value: float, base: float) -> float | None:
    return (value - base) / base if base else None


def multi_job_rows(results: Sequence[SimResult]) -> list[dict]:
    """One summary per policy, with changes against the first policy listed."""
    rows = [r.summary() for r in results]
    base = rows[0] if rows else {}
    for row in rows:
        row["jct_change_vs_first"] = _change(row["avg_jct_s"], base["avg_jct_s"])
        row["queue_change_vs_first"] = _change(row["avg_queue_s"], base["avg_queue_s"])
    return rows


def single_job_rows(results: Sequence[SimResult]) -> list[dict]:
    """The single-job experiment's metrics per policy (the trace's first job)."""
    rows = []
    for result in results:
        job = result.jobs[0]
        rows.append({
            "policy": result.policy,
            "job": job.name,
            "best_steps_per_s": job.best_steps_per_s,
            "jct_s": job.jct_s,
            "time_to_95pct_s": job.time_to_reach_s,
            "restarts": job.restarts,
            "final_shape": job.final_shape,
            "failed": job.failed,
        })  # fmt: skip
    base = rows[0]["jct_s"] if rows else 0.0
    for row in rows:
        row["jct_change_vs_first"] = _change(row["jct_s"], base)
    return rows


def _pct(change: float | None) -> str:
    return "-" if change is None else f"{change:+.1%}"


def _time(seconds: float | None) -> str:
    return "-" if seconds is None else format_duration(seconds)


def multi_job_table(rows: Sequence[dict]) -> tuple[list[str], list[list[str]]]:
    headers = ["policy", "avg JCT", "vs first", "avg queue", "avg run",
               "makespan", "CPU used", "CPU alloc", "restarts", "failed"]  # fmt: skip
    body = [
        [r["policy"], _time(r["avg_jct_s"]), _pct(r["jct_change_vs_first"]),
         _time(r["avg_queue_s"]), _time(r["avg_run_s"]),
         _time(r["makespan_s"]), f"{r['cpu_used_pct']:.1f}%", f"{r['cpu_allocated_pct']:.1f}%",
         str(r["restarts"]), str(r["failed"])]
        for r in rows
    ]  # fmt: skip
    return headers, body


def single_job_table(rows: Sequence[dict]) -> tuple[list[str], list[list[str]]]:
    headers = ["policy", "best steps/s", "JCT", "vs first", "to 95% of best", "restarts",
               "final shape"]  # fmt: skip
    body = [
        [r["policy"], f"{r['best_steps_per_s']:.3g}", _time(r["jct_s"]),
         _pct(r["jct_change_vs_first"]), _time(r["time_to_95pct_s"]), str(r["restarts"]),
         r["final_shape"] + (" (failed)" if r["failed"] else "")]
        for r in rows
    ]  # fmt: skip
    return headers, body
