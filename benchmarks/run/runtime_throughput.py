"""PS training on this machine's cores against plain single-process PyTorch training.

The runtime's cost on one machine: the same model, batch size and optimizer,
trained (a) by one plain PyTorch process on all cores (with 1 torch thread and with
one per core, ``--plain-threads``; the faster is the baseline: sparse embedding
gradients, as the PS uses) and (b) by ``rightsize run``'s PS strategy in each of a
few shapes whose CPU quotas add up to every core (``--shapes``: one PS at 0.3, 0.5
or 0.7 CPU with one or two workers sharing the rest), with the shared-memory data
plane on and off (``--shared-memory on,off``: ``runtime.shared_memory`` auto / off).
The ratio (b)/(a) of median samples/s is the runtime's efficiency; its limit is
1.0. Reported per case: every shape's ratio (median and range over repeats), the
fixed shape 1 PS 0.5 + 1 worker 1.5 (``0.5x1``, continuity with earlier runs) and
the best shape per carrier.

From each PS run it also reports the worker's bytes per step (in + out, from its
transport counters: through shared memory or sockets alike) against the model's
dense bytes. ``--thread-rounding`` measures other rules for a node's torch threads
(``backends/local.py``'s ``THREAD_ROUNDING``: 0 rounds a 1.5-CPU quota down to one
thread, 0.5 up to two) on the shapes where the rule changes the thread count.

One repeat of a case is one unit — plain at each thread count, then every shape
and carrier (the carriers' order alternates between repeats) — so a change in the
machine's load hits them alike; ``--lock FILE`` holds that file's flock for each
unit only, so other users of a shared machine get turns between units. Usage:

    python benchmarks/run/runtime_throughput.py --lock /tmp/rightsize-cpu.lock \\
        --out benchmarks/results/runtime_throughput.json
    python benchmarks/run/runtime_throughput.py --quick   # one short repeat, to check it works
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import itertools
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root: `benchmarks.`
from benchmarks.lib.envelope import write_report
from benchmarks.lib.job import job_spec, master_samples, run_job
from benchmarks.lib.load import load_note
from benchmarks.lib.repeats import median_or_none, steady
from rightsize.core.spec import JobSpec
from rightsize.runtime.backends import local
from rightsize.runtime.model_io import layout_of
from rightsize.runtime.node import build_workload
from rightsize.runtime.paramstore import OptimSettings, make_optimizer
from rightsize.runtime.startup import job_identity
from rightsize.scaling.registry import make_policy

#: (workload, dataset, options, batch size, optimizer, steps): a sparse click model (DLRover's
#: workload) and a dense MLP (every tensor moves every step); steps give about 10 s of
#: training at plain speed on this machine (wide-deep 22-26k, mlp3 11-15k samples/s, Nov 2026).
CASES = {
    "wide-deep": ("wide-deep", "synthetic-criteo", {"embed_dim": 8, "hidden": [64, 32]}, 512,
                  "adagrad", 400),
    "mlp3": ("mlp3", "synthetic-cifar", {"hidden": 256}, 128, "sgd", 1000),
}  # fmt: skip
#: Steps of plain training timed per window (the medians are over windows).
WINDOW_STEPS = 20
#: The PS runs' metric interval: a throughput sample per second.
METRIC_INTERVAL = "1s"
#: The shape earlier runs measured (docs/benchmarks.md): 1 PS at 0.5 CPU, 1 worker.
FIXED_SHAPE = "0.5x1"
CARRIERS = {"on": "auto", "off": "off"}


@dataclass(frozen=True)
class Shape:
    """One PS at ``ps_cpu`` and ``workers`` workers sharing the rest of the machine's cores."""

    ps_cpu: float
    workers: int

    @classmethod
    def parse(cls, text: str) -> Shape:
        ps_cpu, workers = text.split("x")
        return cls(float(ps_cpu), int(workers))

    @property
    def name(self) -> str:
        return f"{self.ps_cpu:g}x{self.workers}"

    def worker_cpu(self, cpus: int) -> float:
        return round((cpus - self.ps_cpu) / self.workers, 3)


def case_spec(directory: Path, case: str, steps: int, shape: Shape | float, overlap: bool = True,
              shared_memory: str = "auto") -> JobSpec:  # fmt: skip
    workload, dataset, options, batch, optimizer, _ = CASES[case]
    shape = shape if isinstance(shape, Shape) else Shape(shape, 1)
    cpus = os.cpu_count() or 1
    runtime = {"overlap": overlap, "shared_memory": shared_memory,
               "metric_interval": METRIC_INTERVAL}  # fmt: skip
    return job_spec(
        directory, name=f"bench-{case}", workload=workload, dataset=dataset, options=options,
        dataset_size=20_000, batch_size=batch, steps=steps,
        training={"optimizer": optimizer, "lr": 0.05}, runtime=runtime,
        initial_shape={"ps": {"count": 1, "cpu": shape.ps_cpu, "memory": "2Gi"},
                       "workers": {"count": shape.workers, "cpu": shape.worker_cpu(cpus),
                                   "memory": "2Gi"}},
    )  # fmt: skip


def plain(spec: JobSpec, steps: int, threads: int) -> dict:
    """Plain PyTorch with ``threads`` torch threads: samples/s per window of
    :data:`WINDOW_STEPS` steps.

    Embedding tables take sparse gradients with their own optimizer, as the parameter
    servers do (a dense update of every row would make plain training the slower one).
    """
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    workload = build_workload(spec)
    model = workload.make_model(seed=spec.training.seed)
    layout = layout_of(model)  # switches the tables to sparse gradients
    t = spec.training
    settings = OptimSettings(t.optimizer, t.lr, t.momentum)
    optimizers = [
        make_optimizer(settings, [layout.params[n] for n in layout.dense], sparse=False),
        make_optimizer(settings, [layout.params[n] for n in sorted(layout.sparse)], sparse=True),
    ]
    optimizers = [o for o in optimizers if o is not None]
    order = torch.randperm(len(workload.dataset), generator=torch.Generator().manual_seed(0))
    rates, start = [], time.perf_counter()
    for step in range(steps):
        first = (step * spec.batch_size) % (len(order) - spec.batch_size)
        batch = workload.batch(order[first : first + spec.batch_size])
        workload.loss(model, batch).backward()
        for optimizer in optimizers:
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        if (step + 1) % WINDOW_STEPS == 0:
            now = time.perf_counter()
            rates.append(WINDOW_STEPS * spec.batch_size / (now - start))
            start = now
    torch.set_num_threads(before)
    return {"samples_per_s": rates, "median_samples_per_s": median_or_none(steady(rates))}


def ps_run(spec: JobSpec) -> dict:
    """The runtime with the static policy: samples/s and worker bytes per step, per interval."""
    master, report, warnings = run_job(spec, make_policy("static"))
    rates = [s["samples_per_s"] for s in report["throughput"]]
    per_step = []
    for sample in master_samples(master):
        for node in sample["nodes"]:
            if node["role"] == "worker" and node["steps_per_s"] > 0:
                per_step.append((node["net_in"] + node["net_out"]) / node["steps_per_s"])
    return {
        "samples_per_s": rates,
        "median_samples_per_s": median_or_none(steady(rates)),
        "worker_bytes_per_step": median_or_none(steady(per_step)),
        "threads": {n.name: master.threads(n) for n in master.job.shape.nodes},
        "isolation": report["isolation"],
        "wall_time_s": report["wall_time_s"],
        "exactly_once": report["accounting"].get("exactly_once"),
        "warnings": warnings,
    }


def model_bytes(spec: JobSpec) -> dict:
    layout = layout_of(build_workload(spec).make_model(seed=0))
    dense = sum(layout.sizes[n] for n in layout.dense)
    return {"model_bytes": sum(layout.sizes.values()), "dense_bytes": dense}


@contextlib.contextmanager
def rounding(value: float):
    """Nodes get ``floor(cpu + value)`` torch threads while inside (the master runs here)."""
    before = local.THREAD_ROUNDING
    local.THREAD_ROUNDING = value
    try:
        yield
    finally:
        local.THREAD_ROUNDING = before


@contextlib.contextmanager
def held(lock: str | None, wait_idle_s: float):
    """The shared machine's CPU lock for one unit of measurement (none: no lock), and then
    up to ``wait_idle_s`` for work outside the lock to end (:func:`busy_cores` under
    :data:`IDLE_CORES`). Yields how busy the machine was when the unit began."""
    with open(lock or os.devnull, "a") as handle:
        if lock:
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            deadline = time.monotonic() + wait_idle_s
            while (busy := busy_cores()) > IDLE_CORES and time.monotonic() < deadline:
                time.sleep(IDLE_POLL_S)
            yield busy
        finally:
            if lock:
                fcntl.flock(handle, fcntl.LOCK_UN)
                time.sleep(LOCK_YIELD_S)  # a waiting user takes the lock before our next unit


#: Seconds between units with the lock free (flock wakes every waiter; the one that just
#: released would win the race for it again at once).
LOCK_YIELD_S = 5.0
#: A unit starts once others use less than this many cores (sampled over IDLE_SAMPLE_S).
IDLE_CORES = 0.15
IDLE_SAMPLE_S = 2.0
IDLE_POLL_S = 5.0


def busy_cores(sample_s: float = IDLE_SAMPLE_S) -> float:
    """Cores busy on the machine over ``sample_s`` (from /proc/stat; this process idles)."""

    def ticks() -> tuple[int, int]:
        fields = [int(f) for f in open("/proc/stat").readline().split()[1:]]
        return sum(fields), fields[3] + fields[4]  # all, idle + iowait

    (all0, idle0), _ = ticks(), time.sleep(sample_s)
    all1, idle1 = ticks()
    return (os.cpu_count() or 1) * (1 - (idle1 - idle0) / max(1, all1 - all0))


@dataclass(frozen=True)
class Variant:
    """One PS configuration measured: a shape, a carrier (``on``/``off``), a thread rule."""

    shape: Shape
    carrier: str
    rounding: float

    @property
    def name(self) -> str:
        return f"{self.shape.name} shm-{self.carrier} round-{self.rounding:g}"


def variants(shapes: list[Shape], carriers: list[str], roundings: list[float]) -> list[Variant]:
    """Every shape with every carrier; a thread rule other than the first only where it gives
    some node another thread count than the first rule does."""
    cpus = os.cpu_count() or 1
    out = []
    for shape, rule in itertools.product(shapes, roundings):
        cpu = [shape.ps_cpu, shape.worker_cpu(cpus)]
        counts = [max(1, min(cpus, int(c + rule))) for c in cpu]
        base = [max(1, min(cpus, int(c + roundings[0]))) for c in cpu]
        if rule != roundings[0] and counts == base:
            continue
        out += [Variant(shape, carrier, rule) for carrier in carriers]
    return out


def measure_unit(case: str, steps: int, threads: list[int], todo: list[Variant], root: Path,
                 repeat: int, sync: bool) -> dict:  # fmt: skip
    """One repeat of ``case``: plain at each thread count, then every variant."""
    base = case_spec(root, case, steps, Shape(0.5, 1))
    run = {"load_before": load_note(),
           "plain_by_threads": {n: plain(base, steps, n) for n in threads}, "ps": {}}  # fmt: skip
    ordered = todo if repeat % 2 == 0 else _swap_carriers(todo)
    for variant in ordered:
        spec = case_spec(root / variant.name.replace(" ", "_"), case, steps, variant.shape,
                         shared_memory=CARRIERS[variant.carrier])  # fmt: skip
        with rounding(variant.rounding):
            run["ps"][variant.name] = ps_run(spec)
        print(f"  {case} repeat {repeat}: {variant.name}: "
              f"{run['ps'][variant.name]['median_samples_per_s'] or 0:,.0f} samples/s",
              file=sys.stderr, flush=True)  # fmt: skip
    if sync:
        spec = case_spec(root / "sync", case, steps, Shape.parse(FIXED_SHAPE), overlap=False)
        run["ps_sync"] = ps_run(spec)
    run["load_after"] = load_note()
    return run


def _swap_carriers(todo: list[Variant]) -> list[Variant]:
    """The same variants with each shape's carriers in the other order."""
    out, i = [], 0
    while i < len(todo):
        group = [v for v in todo[i:] if (v.shape, v.rounding) == (todo[i].shape, todo[i].rounding)]
        out += list(reversed(group))
        i += len(group)
    return out


def summarize(case: str, runs: list[dict], threads: list[int], todo: list[Variant],
              steps: int) -> dict:  # fmt: skip
    """Medians and ranges over repeats: plain per thread count, and every variant's ratio."""
    plain_by = {n: [r["plain_by_threads"][n]["median_samples_per_s"] for r in runs]
                for n in threads}  # fmt: skip
    baseline = [max(r["plain_by_threads"][n]["median_samples_per_s"] for n in threads)
                for r in runs]  # fmt: skip
    table = {}
    for variant in todo:
        rates = [r["ps"][variant.name]["median_samples_per_s"] for r in runs]
        ratios = [rate / plain for rate, plain in zip(rates, baseline, strict=True)]
        table[variant.name] = {
            "shape": variant.shape.name, "carrier": variant.carrier,
            "thread_rounding": variant.rounding,
            "threads": runs[0]["ps"][variant.name]["threads"],
            **_spread("samples_per_s", rates), **_spread("ps_over_plain", ratios),
            "worker_bytes_per_step": median_or_none(
                [r["ps"][variant.name]["worker_bytes_per_step"] for r in runs
                 if r["ps"][variant.name]["worker_bytes_per_step"]]),
            "exactly_once": all(r["ps"][variant.name]["exactly_once"] for r in runs),
        }  # fmt: skip
    best = {}
    for carrier in {v.carrier for v in todo}:
        mine = {k: v for k, v in table.items() if v["carrier"] == carrier}
        name = max(mine, key=lambda k: mine[k]["ps_over_plain"])
        best[carrier] = {"variant": name, **mine[name]}
    fixed = {v.carrier: table[v.name] for v in todo
             if v.shape.name == FIXED_SHAPE and v.rounding == todo[0].rounding}  # fmt: skip
    spec = case_spec(Path(tempfile.mkdtemp()), case, steps, Shape(0.5, 1))
    result = {
        "case": case, "job": job_identity(spec), "workload": spec.workload,
        "batch_size": spec.batch_size, "steps": steps, "repeats": len(runs),
        "plain_samples_per_s_by_threads": {n: _spread("samples_per_s", v)
                                           for n, v in plain_by.items()},
        "plain_baseline": _spread("samples_per_s", baseline),
        "variants": table, "fixed_shape": fixed, "best": best,
        **model_bytes(spec), "runs": runs,
    }  # fmt: skip
    if all("ps_sync" in r for r in runs):
        ratios = [r["ps_sync"]["median_samples_per_s"] / b for r, b in zip(runs, baseline, strict=True)]
        result["fixed_shape_overlap_off"] = _spread("ps_over_plain", ratios)
    for carrier, row in sorted(best.items()):
        print(f"{case:>10}: shm {carrier}: best {row['variant']} {row['ps_over_plain']:.2f} "
              f"({row['ps_over_plain_min']:.2f}-{row['ps_over_plain_max']:.2f}); fixed "
              f"{FIXED_SHAPE} {fixed[carrier]['ps_over_plain']:.2f}", file=sys.stderr)  # fmt: skip
    return result


def _spread(name: str, values: list[float]) -> dict:
    return {name: statistics.median(values), f"{name}_min": min(values),
            f"{name}_max": max(values), f"{name}_each": values}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--cases", default=",".join(CASES), help="comma-separated: " + ", ".join(CASES))
    parser.add_argument("--scale", type=float, default=1.0, help="times each case's steps")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--plain-threads", default=f"1,{os.cpu_count() or 1}",
                        help="torch thread counts of plain training (the faster is the baseline)")
    parser.add_argument("--shapes", default="0.5x1,0.3x1,0.7x1,0.3x2,0.5x2,0.7x2",
                        help="PS CPU x workers (the workers share the other cores); "
                        f"{FIXED_SHAPE} is the shape earlier runs measured")
    parser.add_argument("--shared-memory", default="on,off", help="carriers: on (auto), off")
    parser.add_argument("--thread-rounding", default="0",
                        help="THREAD_ROUNDING values to measure (the first is the baseline rule)")
    parser.add_argument("--rounding-cases", default="mlp3",
                        help="cases measured with the other thread rules too")
    parser.add_argument("--sync", action="store_true",
                        help=f"also run {FIXED_SHAPE} with runtime.overlap off")
    parser.add_argument("--lock", default=None, help="flock this file for each unit")
    parser.add_argument("--wait-idle", type=float, default=600.0,
                        help="seconds a unit waits for work outside the lock to end")
    parser.add_argument("--quick", action="store_true", help="one short repeat: checks it works")
    parser.add_argument("--out", default="benchmarks/results/runtime_throughput.json")
    args = parser.parse_args(argv)  # fmt: skip
    scale, repeats = (0.2, 1) if args.quick else (args.scale, args.repeats)
    shapes = [Shape.parse(s) for s in args.shapes.split(",")]
    carriers = args.shared_memory.split(",")
    if not set(carriers) <= set(CARRIERS) or FIXED_SHAPE not in {s.name for s in shapes}:
        print(f"error: --shared-memory takes on,off and --shapes must hold {FIXED_SHAPE}",
              file=sys.stderr)  # fmt: skip
        return 2
    roundings = [float(r) for r in args.thread_rounding.split(",")]
    threads = sorted({int(n) for n in args.plain_threads.split(",")})
    report = {
        "benchmark": "runtime_throughput",
        "simulated": False,
        "load_before": load_note(),
        "cases": [],
        "unfinished": {},  # the units measured so far of a case not yet summarized
    }
    with tempfile.TemporaryDirectory(prefix="rightsize-bench-") as tmp:
        for case in args.cases.split(","):
            steps = max(4 * WINDOW_STEPS, int(CASES[case][-1] * scale))
            rules = roundings if case in args.rounding_cases.split(",") else roundings[:1]
            todo = variants(shapes, carriers, rules)
            runs = report["unfinished"].setdefault(case, [])
            for repeat in range(repeats):
                with held(args.lock, args.wait_idle) as busy:
                    root = Path(tmp) / f"{case}-{repeat}"
                    run = measure_unit(case, steps, threads, todo, root, repeat, args.sync)
                    runs.append({"busy_cores_before": busy, **run})
                write_report(args.out, report)  # a run stopped midway keeps what it measured
            report["cases"].append(summarize(case, runs, threads, todo, steps))
            del report["unfinished"][case]
    report["load_after"] = load_note()
    del report["unfinished"]
    write_report(args.out, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
