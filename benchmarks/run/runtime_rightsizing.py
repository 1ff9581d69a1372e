"""Right-sizing real jobs: each policy, started mis-sized on a 2-CPU budget, against the oracle.

Issue 17, item 5. For each workload (Wide&Deep and a small CNN, both on the PS
strategy) the script

1. **sweeps** static shapes within the budget — 1-2 PS x 1-3 workers, the PS
   holding 20%, 35% or 50% of the CPU, the workers sharing the rest equally —
   each for ``--sweep-steps`` steps, and takes the steady median samples/s of
   each (warm-up intervals left out). The **oracle** is the fastest shape; it is
   then run for the job's whole fixed work (epochs over a dataset) with the
   static policy: its wall time is the oracle's JCT, its steady median samples/s
   the oracle's throughput;
2. starts the same fixed work **mis-sized** (``STARTS``: too small, and too
   big for its PS) under every policy, for real, and reports per run: JCT (the
   report's wall time: launch to the final checkpoint), the time until an
   interval's samples/s first reached 95% of the oracle's, the final
   throughput (median of the last intervals) over the oracle's, samples per
   allocated CPU-second over the oracle's, applied plans by action, restarts;
3. runs the same jobs in the **simulator** (``rightsizing_sim``), with a
   ``SimModel`` fitted to the sweep's measured speeds (``fit_sim_model``), the
   same start shapes launched as they are, the same policies on the runtime's
   2-s clock, every plan raised to the memory floors, and reports simulated
   against real JCT per policy (the simulator's fidelity).

Every number is measured on this machine (``simulated: false`` rows), except the
``sim`` rows, which say so. Usage:

    python benchmarks/run/runtime_rightsizing.py --out benchmarks/results/runtime_rightsizing.json
    python benchmarks/run/runtime_rightsizing.py --quick   # one workload, 2 policies: checks it works
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root: `benchmarks.`
from benchmarks.lib.envelope import write_report
from benchmarks.lib.job import job_spec, master_samples, run_job
from benchmarks.lib.load import load_note
from benchmarks.lib.repeats import WARMUP_INTERVALS, median_or_none, steady
from benchmarks.run.rightsizing_sim import Setting
from benchmarks.run.rightsizing_sim import simulated_rows as sim_rows
from rightsize.core.resources import Resources
from rightsize.core.shape import ClusterShape
from rightsize.core.spec import JobSpec
from rightsize.core.units import parse_memory
from rightsize.scaling.api import Policy
from rightsize.scaling.registry import make_policy

BUDGET = {"cpu": 2, "memory": "6Gi"}
#: Every node's memory: above each node's floor for both workloads (wide-deep PS 521 MiB,
#: small-cnn worker 444 MiB, runtime/memory_need.py), and 8 nodes fit the 6Gi budget.
NODE_MEMORY = "768Mi"
#: The runtime's metric interval; the policies count their durations on it (scaling.pace).
METRIC_INTERVAL_S = 2.0
#: "Time to 95% of the oracle's throughput" (NEARCHUS Fig. 7-9's reach fraction).
REACH_FRACTION = 0.95
#: Intervals at the end of a run whose median is its final throughput.
FINAL_INTERVALS = 5
POLICIES = ("static", "nearchus", "nearchus+", "dlrover", "optimus")
#: Policy parameters that differ from the defaults, and why. Optimus's 5-vCPU nodes (NEARCHUS
#: §V) cannot start on 2 CPUs: 0.25-CPU nodes (8 fit the budget); its 20 profiling runs need
#: measured prior shapes, which the runtime does not pass (startup.launch_plan: no prior), so
#: none are asked for and it explores from its own shapes.
POLICY_PARAMS: dict[str, dict[str, Any]] = {
    "optimus": {"cores_per_node": 0.25, "profile_configs": 0},
}


@dataclass(frozen=True)
class Workload:
    """One benchmark job: what it trains, and the fixed work every run does."""

    fields: dict[str, Any]
    dataset_size: int
    epochs: int
    sweep_steps: int


#: Fixed work: wide-deep's 1.6M samples took the oracle 102 s on this machine on 2026-11-26
#: (19-23k samples/s; an earlier session's machine ran the same job 3-4 times as fast), and
#: small-cnn's 16,000 samples about a minute (250-320 samples/s on the PS strategy). Sweep
#: steps: 15-25 s of training per shape here.
WORKLOADS = {
    "wide-deep": Workload(
        {"workload": "wide-deep", "dataset": "synthetic-criteo", "batch_size": 512,
         "options": {"embed_dim": 8, "hidden": [64, 32]},
         "training": {"optimizer": "adagrad", "lr": 0.05}},
        dataset_size=200_000, epochs=8, sweep_steps=600,
    ),
    "small-cnn": Workload(
        {"workload": "small-cnn", "dataset": "synthetic-cifar", "batch_size": 64,
         "options": {}, "training": {"optimizer": "sgd", "lr": 0.05}},
        dataset_size=4_000, epochs=4, sweep_steps=100,
    ),
}  # fmt: skip
#: Mis-sized starts as (PS count, PS cpu, worker count, worker cpu).
STARTS = {
    "too-small": (1, 0.2, 2, 0.2),  # 0.6 of the 2 CPUs
    "too-big-ps": (2, 0.6, 1, 0.4),  # 1.2 of 1.6 CPUs on servers that idle
}
#: The sweep's grid: PS count, worker count, the PS's share of the budget's CPU.
SWEEP_PS = (1, 2)
SWEEP_WORKERS = (1, 2, 3)
SWEEP_PS_SHARES = (0.2, 0.35, 0.5)


# -- shapes and specs ---------------------------------------------------------------------
def shape_fields(n_ps: int, ps_cpu: float, n_workers: int, worker_cpu: float) -> dict:
    """A job file's ``initial_shape`` (per-node CPU, :data:`NODE_MEMORY` each)."""
    return {"ps": {"count": n_ps, "cpu": ps_cpu, "memory": NODE_MEMORY},
            "workers": {"count": n_workers, "cpu": worker_cpu, "memory": NODE_MEMORY}}  # fmt: skip


def sweep_grid(budget_cpu: float) -> list[tuple[int, float, int, float]]:
    """Every (PS count, PS cpu, worker count, worker cpu) of the sweep, within ``budget_cpu``
    (per-node CPU rounded down to millicores, so that rounding never crosses the budget)."""
    grid = []
    for n_ps in SWEEP_PS:
        for share in SWEEP_PS_SHARES:
            for n_workers in SWEEP_WORKERS:
                ps_cpu = _millicores_down(budget_cpu * share / n_ps)
                worker_cpu = _millicores_down(budget_cpu * (1 - share) / n_workers)
                grid.append((n_ps, ps_cpu, n_workers, worker_cpu))
    return grid


def _millicores_down(cpu: float) -> float:
    return math.floor(cpu * 1000 + 1e-6) / 1000


def label(shape: tuple[int, float, int, float]) -> str:
    n_ps, ps_cpu, n_workers, worker_cpu = shape
    return f"{n_ps}x{ps_cpu:g}ps+{n_workers}x{worker_cpu:g}wk"


def spec_for(root: Path, name: str, workload: Workload, shape: tuple,
             steps: int | None = None) -> JobSpec:  # fmt: skip
    """The job ``workload`` with ``shape``, for ``steps`` (a sweep) or its fixed epochs."""
    return job_spec(
        root / name, name=name, **workload.fields, budget=BUDGET,
        dataset_size=workload.dataset_size,
        steps=steps, epochs=None if steps else workload.epochs,
        initial_shape=shape_fields(*shape),
        runtime={"metric_interval": f"{METRIC_INTERVAL_S:g}s", "max_restarts": 8},
    )  # fmt: skip


# -- what a run's report says (pure) --------------------------------------------------------
def time_to_reach(throughput: list[dict], target: float) -> float | None:
    """``time_s`` of the first interval whose samples/s is at least ``target``, or None."""
    for row in throughput:
        if row["samples_per_s"] >= target:
            return row["time_s"]
    return None


def final_throughput(throughput: list[dict], last: int = FINAL_INTERVALS) -> float | None:
    """Median samples/s of the last ``last`` intervals."""
    return median_or_none([row["samples_per_s"] for row in throughput[-last:]])


def shape_cpu(shape: dict) -> float:
    """Total allocated CPU of a timeline row's shape (``ClusterShape.to_dict``)."""
    return sum(node["cpu"] for node in shape["nodes"])


def cpu_seconds(timeline: list[dict], end_s: float) -> float:
    """Allocated CPU integrated over time: each applied row's shape holds until the next
    applied row (or ``end_s``)."""
    applied = [row for row in timeline if row["applied"]]
    ends = [row["time_s"] for row in applied[1:]] + [end_s]
    return sum(shape_cpu(row["shape"]) * max(0.0, end - row["time_s"])
               for row, end in zip(applied, ends, strict=True))  # fmt: skip


def plans_by_action(timeline: list[dict]) -> dict[str, dict[str, int]]:
    """Plans after the launch, per action: how many were applied and how many rejected."""
    counts: dict[str, dict[str, int]] = {}
    for row in timeline[1:]:
        entry = counts.setdefault(row["action"], {"applied": 0, "rejected": 0})
        entry["applied" if row["applied"] else "rejected"] += 1
    return counts


def split_transitions(timeline: list[dict]) -> tuple[list[float], list[float]]:
    """The applied rows' transition times, split: (in place — the same nodes, resized —,
    with nodes launched or removed — the launch among them)."""
    in_place: list[float] = []
    with_nodes: list[float] = []
    previous = None
    for row in timeline:
        if not row["applied"]:
            continue
        nodes = sorted((node["name"], node["role"]) for node in row["shape"]["nodes"])
        (in_place if nodes == previous else with_nodes).append(row["transition_s"])
        previous = nodes
    return in_place, with_nodes


def restart_count(report: dict) -> int:
    restarts = report["restarts"]
    return restarts["masters"] + sum(restarts["nodes"].values())


def relative(value: float | None, reference: float | None) -> float | None:
    return value / reference if value is not None and reference else None


# -- real runs ----------------------------------------------------------------------------
@dataclass
class Oracle:
    """The sweep's fastest shape and its full run: the reference of every metric."""

    shape: tuple
    samples_per_s: float
    jct_s: float
    samples_per_cpu_s: float
    steady_rates: list[float]
    sweep: list[dict] = field(default_factory=list)
    report: str | None = None


def measured_run(spec: JobSpec, policy: Policy) -> dict:
    """Run ``spec`` under ``policy``; the report's metrics, or the error if it failed."""
    started = time.perf_counter()
    try:
        master, report, warnings = run_job(spec, policy)
    except Exception as exc:  # a policy or runtime bug: recorded, the benchmark goes on
        return {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc(),
                "elapsed_s": time.perf_counter() - started}  # fmt: skip
    rates = [row["samples_per_s"] for row in report["throughput"]]
    return {
        "report": report, "samples": master_samples(master), "warnings": warnings,
        "jct_s": report["wall_time_s"],
        "steady_samples_per_s": median_or_none(steady(rates)),
        "samples_per_cpu_s": report["samples"] / cpu_seconds(report["timeline"],
                                                             report["wall_time_s"]),
    }  # fmt: skip


def sweep(root: Path, name: str, workload: Workload, steps: int, grid: list) -> list[dict]:
    rows = []
    for shape in grid:
        run = measured_run(spec_for(root, f"{name}-sweep", workload, shape, steps=steps),
                           make_policy("static"))  # fmt: skip
        row = {"shape": label(shape), "shape_tuple": shape, **_slim(run)}
        row["costs"] = node_costs(run.get("samples", []))
        rows.append(row)
        print(f"  sweep {label(shape):>28}: {row.get('steady_samples_per_s') or 0:9.0f} samples/s",
              file=sys.stderr)  # fmt: skip
    return rows


def node_costs(samples: list[dict]) -> dict[str, float | None]:
    """Median over steady intervals of the workers' core-seconds per sample and the servers'
    core-seconds per step (cgroup CPU used over the job's speed): what the CPU pays per unit."""
    worker, ps = [], []
    for sample in steady(samples):
        if sample["samples_per_s"] <= 0:
            continue
        used = {role: sum(n["cpu_used"] for n in sample["nodes"] if n["role"] == role)
                for role in ("worker", "ps")}  # fmt: skip
        worker.append(used["worker"] / sample["samples_per_s"])
        ps.append(used["ps"] / sample["steps_per_s"])
    return {"worker_core_s_per_sample": median_or_none(worker),
            "ps_core_s_per_step": median_or_none(ps)}  # fmt: skip


def _slim(run: dict) -> dict:
    """A run's row without the whole report and samples (those go to their own files)."""
    return {k: v for k, v in run.items() if k not in ("report", "samples")}


def find_oracle(
    root: Path, name: str, workload: Workload, rows: list[dict], reports: Path
) -> Oracle:
    usable = [r for r in rows if r.get("steady_samples_per_s")]
    best = max(usable, key=lambda r: r["steady_samples_per_s"])
    run = measured_run(spec_for(root, f"{name}-oracle", workload, best["shape_tuple"]),
                       make_policy("static"))  # fmt: skip
    if "error" in run:
        raise RuntimeError(f"the oracle's full run failed: {run['error']}")
    print(f"  oracle {best['shape']}: JCT {run['jct_s']:.1f} s, "
          f"{run['steady_samples_per_s']:.0f} samples/s", file=sys.stderr)  # fmt: skip
    rates = steady([row["samples_per_s"] for row in run["report"]["throughput"]])
    return Oracle(best["shape_tuple"], run["steady_samples_per_s"], run["jct_s"],
                  run["samples_per_cpu_s"], rates, rows,
                  keep_report(reports, f"{name}-oracle", run))  # fmt: skip


def policy_row(run: dict, oracle: Oracle) -> dict:
    """One real run's metrics against the oracle."""
    if "error" in run:
        return _slim(run)
    report = run["report"]
    throughput = report["throughput"]
    final = final_throughput(throughput)
    return {
        "jct_s": run["jct_s"],
        "jct_over_oracle": relative(run["jct_s"], oracle.jct_s),
        "time_to_95pct_oracle_s": time_to_reach(throughput, REACH_FRACTION * oracle.samples_per_s),
        "final_samples_per_s": final,
        "final_over_oracle": relative(final, oracle.samples_per_s),
        "samples_per_cpu_s": run["samples_per_cpu_s"],
        "samples_per_cpu_s_over_oracle": relative(run["samples_per_cpu_s"],
                                                  oracle.samples_per_cpu_s),
        "plans": plans_by_action(report["timeline"]),
        "restarts": restart_count(report),
        "final_shape": ClusterShape.from_dict(report["final_shape"]).describe(),
        "exactly_once": report["accounting"].get("exactly_once"),
        "samples": report["samples"],
        "warnings": run["warnings"],
        "transitions_s": [t["transition_s"] for t in report["transitions"]],
        **transition_fields(report["timeline"]),
    }  # fmt: skip


def transition_fields(timeline: list[dict]) -> dict[str, list[float]]:
    in_place, with_nodes = split_transitions(timeline)
    return {"in_place_transitions_s": in_place, "node_transitions_s": with_nodes}


def to_shape(shape: tuple) -> ClusterShape:
    """A (PS count, PS cpu, worker count, worker cpu) tuple as a shape, as the runtime builds it."""
    n_ps, ps_cpu, n_workers, worker_cpu = shape
    memory = parse_memory(NODE_MEMORY)
    return ClusterShape.from_counts(n_ps, n_workers, Resources(ps_cpu, memory),
                                    Resources(worker_cpu, memory))  # fmt: skip


# -- one workload, end to end ---------------------------------------------------------------
@dataclass(frozen=True)
class RunPlan:
    """What one invocation runs (from the flags)."""

    workloads: dict[str, Workload]
    policies: tuple[str, ...]
    starts: tuple[str, ...]
    grid: list | None  # None: the whole sweep grid
    reports: Path  # where each run's report JSON is kept
    sweep_from: dict | None = None  # a saved result whose sweeps stand in for new ones


def policy_of(name: str) -> Policy:
    return make_policy(name, METRIC_INTERVAL_S, **POLICY_PARAMS.get(name, {}))


def run_workload(root: Path, name: str, workload: Workload, plan: RunPlan) -> dict:
    if plan.sweep_from is not None:
        rows = saved_sweep(plan.sweep_from, name)
        print(f"{name}: the saved sweep ({len(rows)} shapes)", file=sys.stderr)
    else:
        grid = plan.grid or sweep_grid(BUDGET["cpu"])
        print(f"{name}: sweep of {len(grid)} shapes, {workload.sweep_steps} steps each",
              file=sys.stderr)  # fmt: skip
        rows = sweep(root, name, workload, workload.sweep_steps, grid)
    oracle = find_oracle(root, name, workload, rows, plan.reports)
    rows = []
    for start in plan.starts:
        for policy in plan.policies:
            key = f"{name}-{start}-{policy}".replace("+", "plus")
            run = measured_run(spec_for(root, key, workload, STARTS[start]), policy_of(policy))
            row = {"workload": name, "start": start, "policy": policy, "simulated": False,
                   **policy_row(run, oracle), "report": keep_report(plan.reports, key, run)}  # fmt: skip
            rows.append(row)
            _print_row(row)
    sim = simulated_rows(root, name, workload, oracle, rows)
    return {"workload": name, "fields": workload.fields, "dataset_size": workload.dataset_size,
            "epochs": workload.epochs, "sweep_steps": workload.sweep_steps,
            "oracle": oracle_dict(oracle), "runs": rows, **sim,
            "goals": goals(rows)}  # fmt: skip


def keep_report(directory: Path, key: str, run: dict) -> str | None:
    if "report" not in run:
        return None
    return str(write_report(directory / f"{key}.json", run["report"]))


def oracle_dict(oracle: Oracle) -> dict:
    return {"shape": label(oracle.shape), "samples_per_s": oracle.samples_per_s,
            "jct_s": oracle.jct_s, "samples_per_cpu_s": oracle.samples_per_cpu_s,
            "steady_samples_per_s": oracle.steady_rates, "report": oracle.report,
            "sweep": [{k: v for k, v in r.items() if k != "shape_tuple"} for r in oracle.sweep]}  # fmt: skip


def _print_row(row: dict) -> None:
    if "error" in row:
        print(f"  {row['start']:>10} {row['policy']:>9}: ERROR {row['error']}", file=sys.stderr)
        return
    reach = row["time_to_95pct_oracle_s"]
    print(f"  {row['start']:>10} {row['policy']:>9}: JCT {row['jct_s']:6.1f} s "
          f"({row['jct_over_oracle']:.2f}x oracle), 95% at "
          f"{'never' if reach is None else f'{reach:.0f} s'}, final "
          f"{row['final_over_oracle'] or 0:.2f}, samples/cpu-s {row['samples_per_cpu_s_over_oracle']:.2f}"
          f", plans {sum(v['applied'] for v in row['plans'].values())}", file=sys.stderr)  # fmt: skip


def simulated_rows(root: Path, name: str, workload: Workload, oracle: Oracle,
                   rows: list[dict]) -> dict:  # fmt: skip
    """Every real run again in the simulator (``rightsizing_sim``), from the same starts."""
    points = [(to_shape(r["shape_tuple"]), r["steady_samples_per_s"]) for r in oracle.sweep
              if r.get("steady_samples_per_s")]  # fmt: skip
    starts = {key: to_shape(start) for key, start in STARTS.items()}
    budget = Resources.parse(BUDGET["cpu"], BUDGET["memory"])
    setting = Setting(budget, METRIC_INTERVAL_S, WARMUP_INTERVALS * METRIC_INTERVAL_S)
    spec = spec_for(root, f"{name}-model", workload, oracle.shape)
    return sim_rows(spec, oracle.sweep, points, oracle.steady_rates, oracle_e_jobs(oracle),
                    rows, starts, policy_of, setting)  # fmt: skip


def oracle_e_jobs(oracle: Oracle) -> list[float]:
    """The oracle's steady ``e_job`` readings, from its kept report (none if not kept)."""
    if oracle.report is None or not Path(oracle.report).is_file():
        return []
    throughput = json.loads(Path(oracle.report).read_text())["throughput"]
    return steady([row["e_job"] for row in throughput if row["e_job"] is not None])


def resimulate(path: Path) -> int:
    """The simulated half again for a saved result (its real runs, sweep and kept reports
    as they are): after a change to the simulator or to how it is fitted."""
    result = json.loads(path.read_text())
    with tempfile.TemporaryDirectory(prefix="rightsize-bench-") as tmp:
        for entry in result["workloads"]:
            name = entry["workload"]
            workload = Workload(entry["fields"], entry["dataset_size"], entry["epochs"],
                                entry["sweep_steps"])  # fmt: skip
            saved = entry["oracle"]
            sweep_rows = saved_sweep(result, name)
            oracle = Oracle(parse_label(saved["shape"]), saved["samples_per_s"], saved["jct_s"],
                            saved["samples_per_cpu_s"], saved["steady_samples_per_s"],
                            sweep_rows, saved["report"])  # fmt: skip
            for row in entry["runs"]:
                if "error" not in row and "node_transitions_s" not in row:
                    report = json.loads(Path(row["report"]).read_text())
                    row.update(transition_fields(report["timeline"]))
            print(f"{name}: simulating {len(entry['runs'])} runs again", file=sys.stderr)
            entry.update(simulated_rows(Path(tmp), name, workload, oracle, entry["runs"]))
    result["resimulated_with"] = "python benchmarks/run/runtime_rightsizing.py --resimulate " + str(
        path
    )
    write_report(path, result)
    return 0


def saved_sweep(result: dict, name: str) -> list[dict]:
    """Workload ``name``'s sweep rows from a saved ``result``, their shapes parsed back."""
    entry = next((e for e in result["workloads"] if e["workload"] == name), None)
    if entry is None:
        raise ValueError(f"the result has no {name} sweep")
    return [{**r, "shape_tuple": parse_label(r["shape"])} for r in entry["oracle"]["sweep"]]


def parse_label(text: str) -> tuple[int, float, int, float]:
    """:func:`label`'s text back as a shape tuple (``2x0.5ps+2x0.5wk``)."""
    ps, workers = text.removesuffix("wk").split("ps+")
    n_ps, ps_cpu = ps.split("x")
    n_workers, worker_cpu = workers.split("x")
    return int(n_ps), float(ps_cpu), int(n_workers), float(worker_cpu)


def goals(rows: list[dict]) -> dict:
    """Issue 17's goals per start: nearchus+ within 10% of the oracle's JCT, and every
    adaptive policy faster than the same start kept static."""
    out = {}
    for start in {r["start"] for r in rows}:
        done = {r["policy"]: r for r in rows if r["start"] == start and "error" not in r}
        static = done.get("static", {}).get("jct_s")
        out[start] = {
            "nearchus+_within_10pct_of_oracle": (done["nearchus+"]["jct_over_oracle"] <= 1.10
                                                 if "nearchus+" in done else None),
            "faster_than_static_start": {p: r["jct_s"] < static for p, r in done.items()
                                         if p != "static" and static is not None},
        }  # fmt: skip
    return out


# -- the command line -----------------------------------------------------------------------
#: ``--quick``: the work and the sweep's steps shrunk by this (a check that the script works;
#: its numbers are dominated by launching).
QUICK_SCALE = 0.2
QUICK_GRID = [(1, 0.5, 1, 1.5), (1, 0.7, 2, 0.65)]


def plan_from(args: argparse.Namespace, sweep_from: dict | None = None) -> RunPlan:
    out = Path(args.out)
    reports = out.parent / f"{out.stem}_reports"
    workloads = {}
    for name in args.workloads.split(","):
        base = WORKLOADS[name]
        steps = args.sweep_steps or base.sweep_steps
        epochs = args.epochs or base.epochs
        workloads[name] = Workload(base.fields, base.dataset_size, epochs, steps)
        if args.quick:  # the first workload, a fifth of its work
            workloads[name] = Workload(base.fields, int(base.dataset_size * QUICK_SCALE),
                                       base.epochs, max(1, int(steps * QUICK_SCALE)))  # fmt: skip
            return RunPlan(workloads, ("static", "nearchus+"), ("too-small",), QUICK_GRID, reports)
    return RunPlan(workloads, tuple(args.policies.split(",")), tuple(args.starts.split(",")),
                   None, reports, sweep_from)  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--workloads", default=",".join(WORKLOADS), help="comma-separated")
    parser.add_argument("--policies", default=",".join(POLICIES), help="comma-separated")
    parser.add_argument("--starts", default=",".join(STARTS), help="comma-separated")
    parser.add_argument(
        "--sweep-steps",
        type=int,
        help="steps per sweep shape (default: "
        + ", ".join(f"{k} {w.sweep_steps}" for k, w in WORKLOADS.items())
        + ")",
    )
    parser.add_argument(
        "--epochs",
        type=int,
        help="the fixed work in epochs, for each workload named (default: "
        + ", ".join(f"{k} {w.epochs}" for k, w in WORKLOADS.items())
        + "); the sweep measures speed per shape, so --sweep-from still applies",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="wide-deep, static and nearchus+, too-small, tiny work: checks it works",
    )
    parser.add_argument("--out", default="benchmarks/results/runtime_rightsizing.json")
    parser.add_argument(
        "--resimulate",
        metavar="RESULT",
        type=Path,
        help="only simulate a saved result's runs again (written back to it)",
    )
    parser.add_argument(
        "--sweep-from",
        metavar="RESULT",
        type=Path,
        help="take each workload's sweep from a saved result instead of "
        "sweeping again (the oracle's full run is still measured)",
    )
    args = parser.parse_args(argv)
    if args.epochs is not None and args.epochs < 1:
        print(f"error: --epochs must be at least 1, got {args.epochs}", file=sys.stderr)
        return 2
    saved = None
    if args.sweep_from is not None:
        try:
            saved = json.loads(args.sweep_from.read_text())
            for name in args.workloads.split(","):
                saved_sweep(saved, name)
        except (OSError, ValueError, KeyError) as exc:
            print(f"error: --sweep-from {args.sweep_from}: {exc}", file=sys.stderr)
            return 2
    if args.resimulate:
        if not args.resimulate.is_file():
            print(f"error: --resimulate: no such file: {args.resimulate}", file=sys.stderr)
            return 2
        return resimulate(args.resimulate)
    if args.quick and args.out == parser.get_default("out"):
        args.out = "benchmarks/results/runtime_rightsizing_quick.json"
    plan = plan_from(args, saved)
    before, started = load_note(), time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="rightsize-bench-") as tmp:
        results = [run_workload(Path(tmp), name, w, plan) for name, w in plan.workloads.items()]
    write_report(args.out, {
        "benchmark": "runtime_rightsizing",
        "simulated": False, "quick": args.quick, "budget": BUDGET, "node_memory": NODE_MEMORY,
        "metric_interval_s": METRIC_INTERVAL_S, "policy_params": POLICY_PARAMS,
        "starts": {k: label(v) for k, v in STARTS.items()},
        "load_before": before, "load_after": load_note(),
        "elapsed_s": time.perf_counter() - started, "workloads": results,
        "sweep_from": str(args.sweep_from) if args.sweep_from else None,
    })  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
