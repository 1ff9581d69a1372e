"""Job traces: NEARCHUS's synthetic trace, the Pollux trace format, and generic CSV traces.

- ``nearchus-40`` (NEARCHUS §V-B): a pool of 30 jobs — each of the five CNNs
  of Table II in six variants of epochs and budget — and 40 arrivals drawn
  from it, Poisson at one job per hour. The paper does not list its variants;
  ours are every pair of ``POOL_EPOCHS`` × ``POOL_BUDGETS_CORES`` (see
  ``nearchus_pool``), budgets that fit cluster A's 100 vCPUs.
- Pollux (``name,time,application,num_replicas,batch_size``; ``time`` is the
  submission second): each GPU replica becomes ``cores_per_replica`` vCPUs of
  budget (5, the node size of Optimus and FA-BF in NEARCHUS §V), at least
  three nodes' worth; each application runs a stand-in simulated model for
  its Pollux epochs (``POLLUX_APPLICATIONS``) times ``work_scale``. The
  trace's ``batch_size`` is not used: simulated models keep their own batch.
- Generic CSV: ``arrival``, ``duration`` and ``cpu`` columns (``gpus``,
  ``memory``, ``model``, ``name`` optional). ``duration`` is how long the job
  runs with its request as a fixed (1 PS, 2 workers) split; each GPU counts as
  ``cores_per_gpu`` vCPUs, since the simulator is CPU-only like NEARCHUS.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rightsize.cluster.models import NEARCHUS_CNNS, sim_model
from rightsize.core.errors import SpecError, unknown_name
from rightsize.core.files import read_text
from rightsize.core.limits import MAX_EPOCHS, POSITIVE, Bound
from rightsize.core.resources import Resources
from rightsize.core.shape import ClusterShape
from rightsize.core.units import format_bytes, parse_cpu, parse_duration, parse_memory

CIFAR10_SAMPLES = 50_000
POOL_EPOCHS = (100, 300)
POOL_BUDGETS_CORES = (30, 60, 100)
ARRIVALS_PER_HOUR = 1.0
NEARCHUS_ARRIVALS = 40
MIN_NODES = 3  # one PS and two workers: the smallest shape every policy here starts with
BUILTIN_TRACES = ("nearchus-40",)
#: Epochs of a simulated job: NEARCHUS runs 100 to 300.
EPOCHS = Bound(0, MAX_EPOCHS, low_open=True)
#: Fraction of each Pollux application's epochs to run (1: all of them).
WORK_SCALE = Bound(0, 100, low_open=True)

# application -> (simulated stand-in, samples per epoch, Pollux's epochs).
# Epochs: adaptdl simulator/applications.py (osdi21-artifact). Samples: CIFAR-10 50k,
# ImageNet-1k 1,281,167, SQuAD v1.1 87,599, PASCAL VOC 07+12 16,551; MovieLens-1M's
# 1,000,209 ratings for NCF and LibriSpeech-100h's 28,539 utterances for DeepSpeech2
# are our assumptions.
POLLUX_APPLICATIONS = {
    "cifar10": ("resnet18", 50_000, 100),
    "imagenet": ("resnet50-imagenet", 1_281_167, 90),
    "ncf": ("wide-deep", 1_000_209, 10),
    "deepspeech2": ("bilstm", 28_539, 80),
    "bert": ("gpt-small", 87_599, 2),
    "yolov3": ("resnet50-imagenet", 16_551, 50),
}
POLLUX_COLUMNS = ("name", "time", "application", "num_replicas", "batch_size")


@dataclass(frozen=True)
class TraceJob:
    """One job of a trace.

    Attributes:
        name: unique within the trace.
        arrival_s: submission time, seconds from the trace's start.
        model: a simulated model name (``cluster.models``).
        budget: the job's resource budget ``R_max``.
        samples_total: training samples to process; or ``None`` with ``duration_s``.
        duration_s: run time at the budget as (1 PS, 2 workers), if the trace gives that
            instead of the work; the simulator converts it.
        origin: where the job was read (``trace t.csv line 3``), for error messages.
        initial_shape: the shape the job starts with, as it is, under every policy (as
            the runtime launches a job file's ``initial_shape``: :mod:`scaling.launch`);
            ``None``: its policy's launch plan.
    """

    name: str
    arrival_s: float
    model: str
    budget: Resources
    samples_total: float | None = None
    duration_s: float | None = None
    origin: str = ""
    initial_shape: ClusterShape | None = None


@dataclass(frozen=True)
class Trace:
    name: str
    jobs: tuple[TraceJob, ...]
    source: str = ""


def budget_of(cpu_cores: float, memory_bytes: int | None = None) -> Resources:
    """A CPU budget, as in NEARCHUS; memory only if the trace gives it (0: not limited)."""
    return Resources(cpu_cores, memory_bytes or 0)


def nearchus_pool() -> tuple[TraceJob, ...]:
    """The 30-job pool: 5 CNNs x (2 epoch counts x 3 budgets), CIFAR-10-sized epochs."""
    return tuple(
        TraceJob(
            f"{model}-e{epochs}-c{cores}",
            0.0,
            model,
            budget_of(cores),
            samples_total=float(epochs * CIFAR10_SAMPLES),
        )
        for model in NEARCHUS_CNNS
        for epochs in POOL_EPOCHS
        for cores in POOL_BUDGETS_CORES
    )


def nearchus_trace(seed: int, arrivals: int = NEARCHUS_ARRIVALS) -> Trace:
    """40 Poisson arrivals at one per hour, each a uniform pick from the pool (NEARCHUS §V-B)."""
    rng = np.random.default_rng([seed, 40])
    pool = nearchus_pool()
    gaps = rng.exponential(3600 / ARRIVALS_PER_HOUR, size=arrivals)
    times = np.concatenate([[0.0], np.cumsum(gaps[:-1])])
    picks = rng.integers(0, len(pool), size=arrivals)
    jobs = tuple(
        TraceJob(f"j{i:03d}-{pool[k].name}", float(t), pool[k].model, pool[k].budget,
                 pool[k].samples_total)
        for i, (t, k) in enumerate(zip(times, picks, strict=True))
    )  # fmt: skip
    return Trace(f"nearchus-{arrivals}", jobs, f"NEARCHUS §V-B synthetic trace, seed {seed}")


def single_job(model: str, budget_cores: float, epochs: float) -> Trace:
    """One job at time 0 (NEARCHUS §V-A's single-job experiment)."""
    sim_model(model)  # raises on an unknown model
    POSITIVE.check(budget_cores, "--budget")
    EPOCHS.check(epochs, "--epochs")
    job = TraceJob(model, 0.0, model, budget_of(budget_cores), epochs * CIFAR10_SAMPLES,
                   origin="--budget")  # fmt: skip
    return Trace(f"{model}-{budget_cores:g}cpu", (job,), "single job")


def _rows(path: Path, required: tuple[str, ...]) -> Iterator[tuple[int, dict[str, str]]]:
    reader = csv.DictReader(io.StringIO(read_text(path, "trace"), newline=""))
    columns = [c.strip() for c in reader.fieldnames or []]
    missing = [c for c in required if c not in columns]
    if missing:
        raise SpecError(
            f"trace {path}: missing column(s) {', '.join(missing)}; "
            f"it needs {', '.join(required)} (has {', '.join(columns) or 'none'})"
        )
    for line, row in enumerate(reader, start=2):
        yield line, {k.strip(): (v or "").strip() for k, v in row.items() if k}


def _number(path: Path, line: int, column: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise SpecError(f"trace {path} line {line}: {column} {text!r} is not a number") from None
    if not math.isfinite(value):
        raise SpecError(f"trace {path} line {line}: {column} {text!r} must be a finite number")
    if value < 0:
        raise SpecError(f"trace {path} line {line}: {column} {value:g} must not be negative")
    return value


def check_fits(trace: Trace, capacity: Resources, cluster: str,
               flag: str = "--cluster") -> None:  # fmt: skip
    """Refuse a job whose budget exceeds the whole cluster: it could never hold it, and the
    policies' searches grow with the budget (a row of 1e30 vCPU would never finish).

    Raises:
        SpecError: naming the job (and its trace line) and the field.
    """
    for job in trace.jobs:
        where = job.origin or f"job {job.name}"
        for field, asked, held, show in (
            ("cpu", job.budget.cpu_cores, capacity.cpu_cores, lambda v: f"{v:g} vCPU"),
            ("memory", job.budget.memory_bytes, capacity.memory_bytes, format_bytes),
        ):
            if asked > held:
                raise SpecError(
                    f"{where}: {field} {show(asked)} is more than cluster {cluster} holds "
                    f"({show(held)}); lower it or simulate a larger {flag}"
                )


def load_pollux(path: str | Path, cores_per_replica: float = 5.0, work_scale: float = 1.0) -> Trace:
    """A Pollux-format trace (``name,time,application,num_replicas,batch_size``).

    Raises:
        SpecError: a missing column, a negative or non-numeric time, no jobs.
        UnknownNameError: an application without a stand-in model.
    """
    path = Path(path)
    WORK_SCALE.check(work_scale, "--work-scale")
    jobs = []
    for line, row in _rows(path, POLLUX_COLUMNS):
        app = row["application"]
        if app not in POLLUX_APPLICATIONS:
            raise unknown_name(f"Pollux application (line {line})", app, POLLUX_APPLICATIONS)
        model, per_epoch, epochs = POLLUX_APPLICATIONS[app]
        replicas = _number(path, line, "num_replicas", row["num_replicas"])
        cores = cores_per_replica * max(replicas, MIN_NODES)
        arrival = _number(path, line, "time", row["time"])
        samples = per_epoch * epochs * work_scale
        jobs.append(TraceJob(row["name"] or f"job-{line}", arrival, model, budget_of(cores),
                             samples, origin=f"trace {path} line {line} (num_replicas "
                             f"{row['num_replicas']})"))  # fmt: skip
    return _finish(path, jobs, f"Pollux trace {path.name}")


def load_csv(
    path: str | Path, default_model: str = "resnet50", cores_per_gpu: float = 5.0
) -> Trace:
    """A generic trace with ``arrival``, ``duration`` and ``cpu`` columns.

    Optional: ``gpus`` (each counted as ``cores_per_gpu`` vCPUs), ``memory``,
    ``model`` (default ``default_model``), ``name``. Times take units (``90s``, ``2h``).

    Raises:
        SpecError: a missing column, a negative or malformed value, no jobs.
        UnknownNameError: an unknown model.
    """
    path = Path(path)
    jobs = []
    for line, row in _rows(path, ("arrival", "duration", "cpu")):
        where = f"trace {path} line {line}"
        arrival = _quantity(parse_duration, row["arrival"], f"{where}: arrival")
        duration = _quantity(parse_duration, row["duration"], f"{where}: duration")
        cores = _quantity(parse_cpu, row["cpu"], f"{where}: cpu")
        cores += cores_per_gpu * _number(path, line, "gpus", row.get("gpus") or "0")
        memory = parse_memory(row["memory"], f"{where}: memory") if row.get("memory") else None
        model = row.get("model") or default_model
        sim_model(model)
        if duration <= 0 or cores <= 0:
            raise SpecError(f"{where}: duration and cpu must be positive")
        name = row.get("name") or f"job-{line - 1}"
        jobs.append(TraceJob(name, arrival, model, budget_of(cores, memory), duration_s=duration,
                             origin=where))  # fmt: skip
    return _finish(path, jobs, f"CSV trace {path.name}")


def _quantity(parse, text: str, field: str) -> float:
    if text.startswith("-"):
        raise SpecError(f"{field} {text!r} must not be negative")
    return parse(text, field)


def _finish(path: Path, jobs: list[TraceJob], source: str) -> Trace:
    if not jobs:
        raise SpecError(f"trace {path} has no jobs")
    names = [j.name for j in jobs]
    if len(set(names)) != len(names):
        dup = next(n for n in names if names.count(n) > 1)
        raise SpecError(f"trace {path}: job name {dup!r} appears twice")
    ordered = sorted(jobs, key=lambda j: j.arrival_s)
    return Trace(path.stem, tuple(ordered), source)


def is_pollux(path: Path) -> bool:
    """True if the file's header has the Pollux columns."""
    header = next(csv.reader(io.StringIO(read_text(path, "trace"), newline="")), [])
    return {"application", "num_replicas"} <= {c.strip() for c in header}


def load_trace(spec: str, seed: int = 1, **options: float) -> Trace:
    """A built-in trace by name (``nearchus-40``) or a CSV file (Pollux or generic).

    ``options``: ``cores_per_replica``, ``work_scale`` (Pollux); ``cores_per_gpu``,
    ``default_model`` (generic).

    Raises:
        UnknownNameError: neither a built-in trace nor an existing file.
    """
    if spec in BUILTIN_TRACES:
        return nearchus_trace(seed)
    path = Path(spec)
    if path.suffix.lower() != ".csv" and not path.exists():
        raise unknown_name("trace (a built-in name or a CSV file)", spec, BUILTIN_TRACES)
    if is_pollux(path):
        keys = ("cores_per_replica", "work_scale")
        return load_pollux(path, **{k: v for k, v in options.items() if k in keys})
    keys = ("cores_per_gpu", "default_model")
    return load_csv(path, **{k: v for k, v in options.items() if k in keys})
