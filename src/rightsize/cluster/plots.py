"""PNG plots of simulation results, drawn with matplotlib's Agg canvas (no display needed).

- ``jct_breakdown.png`` — average queueing and run time per policy (NEARCHUS Fig. 11);
- ``utilization.png`` — the cluster's used CPU over time per policy;
- ``throughput.png`` — one job's training speed over time per policy (NEARCHUS Fig. 8).

Figures are built on ``matplotlib.figure.Figure`` with an Agg canvas, so no
global pyplot state or backend is touched; each file is written to a temporary
name and renamed, so a failed run never leaves half a PNG.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence
from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from rightsize.cluster.report import SIMULATED_NOTE
from rightsize.cluster.results import JobResult, SimResult
from rightsize.core.errors import SpecError

HOUR_S = 3600.0


def _save(figure: Figure, path: Path) -> Path:
    FigureCanvasAgg(figure)
    figure.subplots_adjust(bottom=0.18)
    figure.text(0.01, 0.01, SIMULATED_NOTE, fontsize=6, color="gray")
    handle, tmp = tempfile.mkstemp(dir=path.parent, suffix=".png.tmp")
    os.close(handle)
    try:
        figure.savefig(tmp, format="png", dpi=120)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
    return path


def jct_breakdown(results: Sequence[SimResult], path: Path) -> Path:
    figure = Figure(figsize=(6, 4))
    ax = figure.add_subplot()
    names = [r.policy for r in results]
    summaries = [r.summary() for r in results]
    queue = [s["avg_queue_s"] / HOUR_S for s in summaries]
    run = [s["avg_run_s"] / HOUR_S for s in summaries]
    ax.bar(names, queue, label="queueing")
    ax.bar(names, run, bottom=queue, label="run")
    ax.set_ylabel("average JCT (hours)")
    ax.set_title(f"{results[0].trace} on cluster {results[0].cluster} (seed {results[0].seed})")
    ax.legend()
    return _save(figure, path)


def utilization(results: Sequence[SimResult], path: Path) -> Path:
    figure = Figure(figsize=(8, 4))
    ax = figure.add_subplot()
    for result in results:
        times = [t / HOUR_S for t, _, _ in result.usage]
        used = [100 * u / result.capacity_cores for _, u, _ in result.usage]
        ax.step(times, used, where="post", label=result.policy, linewidth=1)
    ax.set_xlabel("time (hours)")
    ax.set_ylabel("cluster CPU used (%)")
    ax.set_title(f"CPU utilization, cluster {results[0].cluster}")
    ax.legend()
    return _save(figure, path)


def _job(result: SimResult, name: str | None) -> JobResult:
    if name is None:
        return result.jobs[0]
    for job in result.jobs:
        if job.name == name:
            return job
    raise SpecError(f"--plot-job {name!r} is not a job of trace {result.trace}")


def throughput(results: Sequence[SimResult], path: Path, job_name: str | None = None) -> Path:
    figure = Figure(figsize=(8, 4))
    ax = figure.add_subplot()
    for result in results:
        job = _job(result, job_name)
        start = job.start_s or 0.0
        times = [(t - start) / HOUR_S for t, _, _ in job.timeline]
        steps = [rate / job.batch_size for _, rate, _ in job.timeline]
        ax.step(times, steps, where="post", label=result.policy, linewidth=1)
    ax.set_xlabel("hours since the job started")
    ax.set_ylabel("training speed (steps/s)")
    ax.set_title(f"job {_job(results[0], job_name).name}")
    ax.legend()
    return _save(figure, path)


def write_plots(
    results: Sequence[SimResult], directory: str | Path, job_name: str | None = None
) -> list[Path]:
    """All three plots into ``directory`` (created if missing).

    Raises:
        SpecError: ``directory`` cannot be created, or ``job_name`` is not in the trace.
    """
    out = Path(directory)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SpecError(
            f"--plots {directory}: cannot create the directory ({exc.strerror})"
        ) from None
    _job(results[0], job_name)  # check the name before drawing anything
    return [
        jct_breakdown(results, out / "jct_breakdown.png"),
        utilization(results, out / "utilization.png"),
        throughput(results, out / "throughput.png", job_name),
    ]
