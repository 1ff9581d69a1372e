"""PS scaling on this machine's runtime, and the PS models fitted and checked against it.

Issue 18 item 4: the PS model must carry the costs that saturate real PS clusters.
This runs real PS jobs through the runtime (the master in this process, every node
a process in its own CPU cgroup, gradients and parameters over TCP sockets: the
shared-memory carrier is off, as across hosts) with one PS at ``--ps-cpus`` cores
and 1..``--max-workers`` workers of ``--worker-cpu`` each, and measures per run the
steady steps/s, the PS's CPU use and the bytes each step moves. Then it fits:

- the PS's CPU-seconds per update and per byte moved, by least squares on the
  PS's own CPU readings (cgroup cpuacct: what it used, not what it was given)
  against updates/s and bytes/s (one model moves the same bytes every step,
  so only their sum per step is identifiable from it: the split needs cases
  of different sizes, ``--cases mlp3,wide-deep``);
- the workers' step outside the PS (``Z``) from the one-worker runs;

and predicts every curve with the queueing model (perf/ps.py
``ps_throughput_queueing``) and DLRover's eq. 1 (``ps_throughput``, the update
cost fitted alone, as that model has no per-byte cost). Errors are held out:
each PS setting's curve is predicted by a fit on the other settings. Reported:
MAPE per curve and model, and the saturation point (the first worker count
whose next worker adds < 10%) measured and predicted.

    python benchmarks/ps/ps_scaling.py --lock /tmp/rightsize-cpu.lock \\
        --out benchmarks/results/ps_scaling.json

With ``--ceiling`` (benchmarks/ps/ps_ceiling.py results for the same case, one or more), both
models are also checked with the shared host it measured (``queueing+host``,
``dlrover+host``). Both are also checked with each worker bounded by its CPU quota
(``queueing+quota``, ``dlrover+quota``; perf/ps.py ``WorkerSpec.cores``): a worker's CPU per
step alone is solved from the fit set's one-worker runs (the larger of its quota bound and
its unthrottled step reproduces their step), and what each co-located worker adds to it is
fitted to the ceiling runs' worker CPU per step (0 without them); the host, where measured,
then carries the workers' CPU per step as it grows. Every held-out split reads only the
ceiling runs at other PS settings than the one it predicts. The stored curves are re-fitted
without running anything with ``--refit``:

    python benchmarks/ps/ps_scaling.py --refit benchmarks/results/ps_scaling.json \\
        --ceiling benchmarks/results/ps_ceiling_wide_deep.json benchmarks/results/ps_ceiling_mlp3.json \\
        --out benchmarks/results/ps_scaling.json
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import os
import statistics
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root: `benchmarks.`
from benchmarks.lib.envelope import write_report
from benchmarks.lib.errors import mape_percent
from benchmarks.lib.job import job_spec, master_samples, run_job
from benchmarks.lib.load import load_note
from benchmarks.lib.repeats import shuffled, steady
from rightsize.perf.ps import PSSpec, WorkerSpec, ps_throughput, ps_throughput_queueing
from rightsize.scaling.registry import make_policy

#: (workload, dataset, options, batch, optimizer): a dense MLP, every tensor moved every step,
#: as in CM-DARE's CIFAR-10 ResNets.
CASES = {
    "mlp3": ("mlp3", "synthetic-cifar", {"hidden": 256}, 128, "sgd"),
    "wide-deep": ("wide-deep", "synthetic-criteo", {"embed_dim": 8, "hidden": [64, 32]}, 512,
                  "adagrad"),
}  # fmt: skip
#: Quotas that never add up to more than this machine's 2 cores: a 1-core PS and 6 workers
#: of 1/6 core fill it.
PS_CPUS = (0.25, 0.5, 1.0)
WORKER_CPU = 0.166
MAX_WORKERS = 6
STEPS_PER_WORKER = 150
SATURATION_GAIN = 0.10  # saturated once one more worker adds less than this


def run_spec(root: Path, case: str, ps_cpu: float, workers: int, worker_cpu: float,
             steps_per_worker: int, overlap: bool = True):  # fmt: skip
    workload, dataset, options, batch, optimizer = CASES[case]
    return job_spec(
        root, name=f"ps-{case}", workload=workload, dataset=dataset, options=options,
        dataset_size=50_000, batch_size=batch, steps=steps_per_worker * workers,
        training={"optimizer": optimizer, "lr": 0.05},
        runtime={"shared_memory": "off", "metric_interval": "1s", "overlap": overlap},
        budget={"cpu": 2, "memory": "8Gi"},
        initial_shape={"ps": {"count": 1, "cpu": ps_cpu, "memory": "1Gi"},
                       "workers": {"count": workers, "cpu": worker_cpu, "memory": "1Gi"}},
    )  # fmt: skip


def measure(spec) -> dict:
    """One static run: steady steps/s, the PS's CPU use and the bytes a step moves through it."""
    master, report, warnings = run_job(spec, make_policy("static"))
    rows = steady(master_samples(master))  # the state's samples keep every node's readings
    steps, ps_cpu, ps_bytes, worker_cpu = [], [], [], []
    for row in rows:
        ps = [n for n in row["nodes"] if n["role"] == "ps"]
        if not ps or not row["steps_per_s"]:
            continue
        steps.append(row["steps_per_s"])
        ps_cpu.append(sum(n["cpu_used"] for n in ps))
        ps_bytes.append(sum(n["net_in"] + n["net_out"] for n in ps))
        # the workers' CPU per step, for the quota model's growth with co-located workers
        worker_cpu.append(sum(n["cpu_used"] for n in row["nodes"] if n["role"] == "worker"))
    if not steps:
        return {"error": "no steady samples", "warnings": warnings}
    return {
        "steps_per_s": statistics.median(steps),
        "ps_cpu_used": statistics.median(ps_cpu),
        "ps_bytes_per_s": statistics.median(ps_bytes),
        "bytes_per_step": statistics.median(b / s for b, s in zip(ps_bytes, steps, strict=True)),
        "worker_cpu_s_per_step": statistics.median(
            c / s for c, s in zip(worker_cpu, steps, strict=True)
        ),
        "samples": len(steps),
        "exactly_once": report["accounting"].get("exactly_once"),
        "wall_time_s": report["wall_time_s"],
        "warnings": warnings,
    }


@contextlib.contextmanager
def held(lock: str | None):
    with open(lock or os.devnull, "a") as handle:
        if lock:
            fcntl.flock(handle, fcntl.LOCK_EX)
        yield


# -- the fits -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Fit:
    update_cpu_s: float  # PS CPU-seconds per update
    cpu_s_per_byte: float  # PS CPU-seconds per byte moved
    think_s: float  # a worker's step outside the PS
    worker_cpu_s: float = 0.0  # a worker's CPU per step alone (quota models)
    worker_cpu_growth_s: float = 0.0  # what each co-located worker adds to it


def fit_ps_cpu(rows: list[dict], per_byte: bool = True) -> tuple[float, float]:
    """PS cores used ≈ a · updates/s + b · bytes/s (non-negative least squares)."""
    from scipy.optimize import nnls

    x = np.array([[r["steps_per_s"], r["ps_bytes_per_s"]] if per_byte else [r["steps_per_s"]]
                  for r in rows])  # fmt: skip
    y = np.array([r["ps_cpu_used"] for r in rows])
    scale = x.max(axis=0)
    coef, _ = nnls(x / scale, y)
    coef = coef / scale
    return float(coef[0]), float(coef[1]) if per_byte else 0.0


def fit(rows: list[dict], per_byte: bool = True, host: Host | None = None) -> Fit:
    """The PS's costs, and ``Z`` from the one-worker runs: their step less the PS's demand (and,
    given the shared host, less its demand too: one worker then waits for neither)."""
    a, b = fit_ps_cpu(rows, per_byte)
    thinks = []
    for r in rows:
        if r["workers"] == 1:
            ps_cpu_s = a + b * r["bytes_per_step"]
            demand = ps_cpu_s / r["ps_cpu"]
            if host is not None:
                demand += (ps_cpu_s + host.colocated_cpu_s_per_step) / host.cores
            thinks.append(1 / r["steps_per_s"] - demand)
    return Fit(a, b, max(1e-6, statistics.median(thinks)))


@dataclass(frozen=True)
class Host:
    """The shared host, from benchmarks/ps/ps_ceiling.py: cores left to the job, and the CPU the
    co-located workers and master spend per step (perf/ps.py ``PSSpec.host_cores``); the
    quota models take the workers' part from their own fit and only the master's from here."""

    cores: float
    colocated_cpu_s_per_step: float
    master_cpu_s_per_step: float = 0.0


@dataclass(frozen=True)
class Ceiling:
    """benchmarks/ps/ps_ceiling.py runs of one case (from one or more results) on a host of
    ``cpus`` cores."""

    cpus: float
    runs: tuple[dict, ...]

    @classmethod
    def of(cls, results: list[dict], case: str) -> Ceiling | None:
        mine = [r for r in results if r.get("case") == case]
        runs = tuple(run for r in mine for run in r.get("runs", []) if "error" not in run)
        return cls(mine[0]["load_before"]["cpus"], runs) if runs else None

    def without(self, ps_cpu: float) -> Ceiling | None:
        """The runs at other PS settings: what a split holding ``ps_cpu`` out may read."""
        runs = tuple(r for r in self.runs if r["ps_cpu"] != ps_cpu)
        return Ceiling(self.cpus, runs) if runs else None

    def host(self) -> Host:
        """The quietest run at the most workers (the fewest cores taken by anything but the
        job's nodes)."""
        most = max(r["workers"] for r in self.runs)
        run = min((r for r in self.runs if r["workers"] == most), key=lambda r: r["others_cores"])
        return Host(self.cpus - run["others_cores"],
                    run["worker_cpu_s_per_step"] + run["master_cpu_s_per_step"],
                    run["master_cpu_s_per_step"])  # fmt: skip

    def worker_cpu_growth_s(self, alone_s: float) -> float:
        """What each co-located worker adds to a worker's CPU per step: least squares through
        ``alone_s`` at one worker, over the runs' measured CPU per step."""
        return growth_through(
            alone_s, [(r["workers"], r["worker_cpu_s_per_step"]) for r in self.runs]
        )


def growth_through(alone_s: float, points: list[tuple[int, float]]) -> float:
    """Slope of CPU per step against co-located workers, through ``alone_s`` at one worker
    (non-negative: more workers never make a step cheaper)."""
    den = sum((n - 1) ** 2 for n, _ in points)
    num = sum((n - 1) * (cpu - alone_s) for n, cpu in points)
    return max(0.0, num / den) if den else 0.0


def fit_quota(rows: list[dict], worker_cores: float, queueing: bool, host: Host | None = None,
              ceiling: Ceiling | None = None) -> Fit:  # fmt: skip
    """The PS's costs as :func:`fit`, and the quota'd worker (perf/ps.py ``WorkerSpec.cores``):
    its CPU per step alone, solved from each one-worker run, and its growth with co-located
    workers from the fit set's and the ceiling runs' worker CPU per step. The worker's own
    unthrottled time is taken as that CPU (a step is compute; the rest is the PS and host)."""
    a, b = fit_ps_cpu(rows, queueing)
    alone = statistics.median(
        alone_cpu_s(r, a + b * r["bytes_per_step"], worker_cores, host if queueing else None)
        for r in rows
        if r["workers"] == 1
    )
    points = [
        (r["workers"], r["worker_cpu_s_per_step"]) for r in rows if "worker_cpu_s_per_step" in r
    ]
    if ceiling is not None:
        points += [(r["workers"], r["worker_cpu_s_per_step"]) for r in ceiling.runs]
    return Fit(a, b, alone, alone, growth_through(alone, points))


def alone_cpu_s(run: dict, ps_cpu_s: float, worker_cores: float, host: Host | None) -> float:
    """The worker CPU per step ``c`` that gives a one-worker run its step ``T``, where
    ``T = max(c / cores, c + D_ps + D_host)`` and ``D_host = (PS CPU + master + c) / host``:
    both terms grow with ``c``, so ``c`` is the smaller of the two terms' inverses."""
    step = 1 / run["steps_per_s"]
    rest, per_c = step - ps_cpu_s / run["ps_cpu"], 1.0
    if host is not None:
        rest -= (ps_cpu_s + host.master_cpu_s_per_step) / host.cores
        per_c += 1 / host.cores
    return max(1e-6, min(step * worker_cores, rest / per_c))


def predict(f: Fit, ps_cpu: float, workers: int, bytes_per_step: float, queueing: bool,
            host: Host | None = None, worker_cores: float | None = None) -> float:  # fmt: skip
    """Steps/s by one model; ``worker_cores`` set: with the worker's quota and CPU from ``f``
    (the host then counts the master's CPU beside it, the workers' coming from ``f``)."""
    # bytes_per_step counts both directions: the models move 2 x model bytes
    model_bytes = int(bytes_per_step / 2)
    quota = {} if worker_cores is None else {
        "cores": worker_cores, "cpu_s_per_step": f.worker_cpu_s, "cpu_growth_s": f.worker_cpu_growth_s}  # fmt: skip
    worker = WorkerSpec(batch=1, compute_s=f.think_s, link_bytes_per_s=float("inf"), **quota)
    shared = {}
    if host is not None:
        others = (
            host.colocated_cpu_s_per_step if worker_cores is None else host.master_cpu_s_per_step
        )
        shared = {"host_cores": host.cores, "colocated_cpu_s_per_step": others}
    if queueing:
        ps = PSSpec(
            1, f.update_cpu_s, ps_cpu, float("inf"), cpu_s_per_byte=f.cpu_s_per_byte, **shared
        )
        return ps_throughput_queueing([worker] * workers, ps, model_bytes).steps_per_s
    ps = PSSpec(1, f.update_cpu_s, ps_cpu, float("inf"), headroom=1.0, **shared)
    return ps_throughput([worker] * workers, ps, model_bytes).steps_per_s


def saturation(curve: dict[int, float]) -> int | None:
    """The first worker count whose next worker adds less than :data:`SATURATION_GAIN`."""
    counts = sorted(curve)
    for n, nxt in zip(counts, counts[1:], strict=False):
        if curve[nxt] < curve[n] * (1 + SATURATION_GAIN):
            return n
    return None


def held_out(rows: list[dict], ceiling: Ceiling | None = None,
             worker_cores: float = WORKER_CPU) -> dict:  # fmt: skip
    """Each PS setting's curve predicted by fits on the others, by both models; with the
    workers' quota (``queueing+quota``, ``dlrover+quota``); and, given ceiling runs at other
    PS settings, with the shared host they measured (``+host``: the quota models take it too)."""
    out = {}
    for ps_cpu in sorted({r["ps_cpu"] for r in rows}):
        seen = [r for r in rows if r["ps_cpu"] != ps_cpu]
        test = sorted((r for r in rows if r["ps_cpu"] == ps_cpu), key=lambda r: r["workers"])
        if not seen or not test:
            continue
        mine = ceiling.without(ps_cpu) if ceiling else None  # never the held-out setting's runs
        host = mine.host() if mine else None
        entry = {"measured": {r["workers"]: r["steps_per_s"] for r in test},
                 "host": host.__dict__ if host else None}  # fmt: skip
        for name, queueing in (("queueing", True), ("dlrover", False)):
            fits = {name: (fit(seen, per_byte=queueing), None, None),
                    f"{name}+quota": (fit_quota(seen, worker_cores, queueing, host, mine), host,
                                      worker_cores)}  # fmt: skip
            if host is not None:
                fits[f"{name}+host"] = (fit(seen, queueing, host if queueing else None), host, None)
            for label, (f, shared, cores) in fits.items():
                predicted = {r["workers"]: predict(f, ps_cpu, r["workers"], r["bytes_per_step"],
                                                   queueing, shared, cores) for r in test}  # fmt: skip
                entry[label] = scored(predicted, entry["measured"], f)
        entry["measured_saturation_at"] = saturation(entry["measured"])
        out[f"{ps_cpu:g}"] = entry
    return out


def mape(predicted: dict[int, float], measured: dict[int, float]) -> float:
    """The mean absolute error over a curve's measured worker counts, as a fraction."""
    return mape_percent([predicted[n] for n in measured], list(measured.values())) / 100


def scored(predicted: dict[int, float], measured: dict[int, float], f: Fit) -> dict:
    return {"predicted": predicted, "mape": mape(predicted, measured),
            "saturation_at": saturation(predicted), "fit": f.__dict__}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--cases", default="mlp3", help="comma-separated: " + ",".join(CASES))
    parser.add_argument("--ps-cpus", default=",".join(f"{c:g}" for c in PS_CPUS))
    parser.add_argument("--max-workers", type=int, default=MAX_WORKERS)
    parser.add_argument("--worker-cpu", type=float, default=WORKER_CPU)
    parser.add_argument("--steps-per-worker", type=int, default=STEPS_PER_WORKER)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--lock", help="hold this file's flock for each run (shared machine)")
    parser.add_argument("--refit", type=Path, help="only fit a saved result's runs again")
    parser.add_argument("--ceiling", type=Path, nargs="+", default=[],
                        help="benchmarks/ps/ps_ceiling.py results: also predict with the shared host "
                             "and the workers' CPU growth they measured")  # fmt: skip
    parser.add_argument("--out", default="benchmarks/results/ps_scaling.json")
    args = parser.parse_args(argv)
    ceilings = [json_load(path) for path in args.ceiling]
    if args.refit:
        result = json_load(args.refit)
        result["ceiling"] = [str(path) for path in args.ceiling] or None
        for case in result["cases"]:
            case.pop("host", None)  # each split now names its own (held_out)
            if "all_runs" in case:  # merged again: older merges dropped the worker CPU
                case["runs"] = merge_repeats([r for r in case["all_runs"] if "error" not in r])
            case["held_out"] = held_out(case["runs"], Ceiling.of(ceilings, case["case"]),
                                        result.get("worker_cpu", WORKER_CPU))  # fmt: skip
        write_report(args.out, result)
        return 0
    unknown = [c for c in args.cases.split(",") if c not in CASES]
    if unknown or args.max_workers < 1 or args.repeats < 1:
        print(f"error: unknown case(s) {unknown} or a count below 1", file=sys.stderr)
        return 2
    ps_cpus = [float(c) for c in args.ps_cpus.split(",")]
    result = {"benchmark": "ps_scaling",
              "load_before": load_note(), "worker_cpu": args.worker_cpu, "cases": []}  # fmt: skip
    for case in args.cases.split(","):
        runs = []
        with tempfile.TemporaryDirectory(prefix="rightsize-ps-") as tmp:
            for repeat in range(args.repeats):
                for ps_cpu, workers in run_order(ps_cpus, args.max_workers, repeat):
                    spec = run_spec(Path(tmp) / f"{repeat}-{ps_cpu}-{workers}", case, ps_cpu,
                                    workers, args.worker_cpu, args.steps_per_worker)  # fmt: skip
                    with held(args.lock):
                        row = measure(spec)
                    row.update(ps_cpu=ps_cpu, workers=workers, repeat=repeat)
                    print(f"{case} ps {ps_cpu:g} x {workers} (repeat {repeat}): "
                          f"{row.get('steps_per_s', 0):.1f} steps/s, PS "
                          f"{row.get('ps_cpu_used', 0):.2f} cores", file=sys.stderr)  # fmt: skip
                    runs.append(row)
        good = merge_repeats([r for r in runs if "error" not in r])
        result["cases"].append({"case": case, "runs": good, "all_runs": runs,
                                "held_out": held_out(good, Ceiling.of(ceilings, case),
                                                     args.worker_cpu)})  # fmt: skip
    result["load_after"] = load_note()
    write_report(args.out, result)
    return 0


def run_order(ps_cpus: Sequence[Any], max_workers: int, repeat: int) -> list[tuple[Any, int]]:
    """Every (PS cores, workers) point once, shuffled per repeat: this shared host's speed
    drifts by tens of percent over minutes (a worker's CPU per step ranged 9.5-16.6 ms across
    one sequential run), and in worker order a drift bends a curve instead of scattering
    its points, which the repeats' medians then remove."""
    return shuffled([(c, n) for c in ps_cpus for n in range(1, max_workers + 1)], seed=repeat)


#: What a merged row keeps, the median over its repeats (worker CPU per step: runs since
#: 2026-11-27 record it; the quota models read it).
MERGED_FIELDS = ("steps_per_s", "ps_cpu_used", "ps_bytes_per_s", "bytes_per_step",
                 "worker_cpu_s_per_step")  # fmt: skip


def merge_repeats(runs: list[dict], keys: tuple[str, ...] = ("ps_cpu", "workers"),
                  fields: tuple[str, ...] = MERGED_FIELDS) -> list[dict]:  # fmt: skip
    """One row per point (``keys``: PS cores and workers): the medians of ``fields`` over its
    repeats (a field only where every repeat has it)."""
    keyed: dict[tuple, list[dict]] = {}
    for r in runs:
        keyed.setdefault(tuple(r[k] for k in keys), []).append(r)
    return [{**dict(zip(keys, k, strict=True)), "repeats": len(v),
             **{f: statistics.median(r[f] for r in v) for f in fields
                if all(f in r for r in v)}}
            for k, v in sorted(keyed.items())]  # fmt: skip


def json_load(path: Path) -> dict:
    import json

    return json.loads(path.read_text())


if __name__ == "__main__":
    sys.exit(main())
