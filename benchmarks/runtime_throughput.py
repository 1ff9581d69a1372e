"""PS training with 1 PS + 1 worker on all cores, against plain single-process PyTorch training.

The runtime's cost on one machine: the same model, batch size and optimizer,
trained (a) by one plain PyTorch process on all cores (the faster of 1 torch thread
and one per core, ``--plain-threads``: on a shared 2-vCPU machine two threads can
be several times slower than one; sparse embedding gradients, as the PS uses) and (b) by
``rightsize run``'s PS strategy with one parameter server and one worker whose
CPU quotas add up to every core. The ratio (b)/(a) of median samples/s is the
runtime's efficiency; its limit is 1.0 (the worker also pulls, pushes, and
leases shards, and the PS applies the optimizer in another process).

From the PS run it also reports the worker's bytes per step (network in + out,
from its transport counters) against the model's size: the dense tensors move
both ways every step, embedding tables only the rows a batch touches.

Runs are interleaved (plain, PS, plain, PS, ...) so a change in the machine's load
hits both. Usage:

    python benchmarks/runtime_throughput.py --out benchmarks/results/runtime_throughput.json
    python benchmarks/runtime_throughput.py --quick   # one short repeat, to check it works
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from bench_io import write_report
from rightsize.core.spec import JobSpec
from rightsize.runtime.model_io import layout_of
from rightsize.runtime.node import build_workload
from rightsize.runtime.paramstore import OptimSettings, make_optimizer
from rightsize.runtime.startup import job_identity
from rightsize.scaling.registry import make_policy
from runtime_common import job_spec, load_note, median_or_none, run_job, steady

#: (workload, dataset, options, batch size, optimizer, steps): a sparse click model (DLRover's
#: workload) and a dense MLP (every tensor moves every step); steps give runs of about 30-60 s.
CASES = {
    "wide-deep": ("wide-deep", "synthetic-criteo", {"embed_dim": 8, "hidden": [64, 32]}, 512,
                  "adagrad", 600),
    "mlp3": ("mlp3", "synthetic-cifar", {"hidden": 256}, 128, "sgd", 600),
}  # fmt: skip
#: Steps of plain training timed per window (the medians are over windows).
WINDOW_STEPS = 20


def case_spec(directory: Path, case: str, steps: int, ps_cpu: float,
              overlap: bool = True) -> JobSpec:  # fmt: skip
    workload, dataset, options, batch, optimizer, _ = CASES[case]
    cpus = os.cpu_count() or 1
    return job_spec(
        directory, name=f"bench-{case}", workload=workload, dataset=dataset, options=options,
        dataset_size=20_000, batch_size=batch, steps=steps,
        training={"optimizer": optimizer, "lr": 0.05}, runtime={"overlap": overlap},
        initial_shape={"ps": {"count": 1, "cpu": ps_cpu, "memory": "2Gi"},
                       "workers": {"count": 1, "cpu": cpus - ps_cpu, "memory": "2Gi"}},
    )  # fmt: skip


def plain(spec: JobSpec, steps: int, threads: int) -> dict:
    """Plain PyTorch with ``threads`` torch threads: samples/s per window of
    :data:`WINDOW_STEPS` steps.

    Embedding tables take sparse gradients with their own optimizer, as the parameter
    servers do (a dense update of every row would make plain training the slower one).
    """
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
        "isolation": report["isolation"],
        "wall_time_s": report["wall_time_s"],
        "exactly_once": report["accounting"].get("exactly_once"),
        "warnings": warnings,
    }


def master_samples(master) -> list[dict]:
    from rightsize.runtime.state import StateStore

    store = StateStore(master.spec.state_path)
    try:
        return store.samples()
    finally:
        store.close()


def model_bytes(spec: JobSpec) -> dict:
    layout = layout_of(build_workload(spec).make_model(seed=0))
    dense = sum(layout.sizes[n] for n in layout.dense)
    return {"model_bytes": sum(layout.sizes.values()), "dense_bytes": dense}


def measure_case(case: str, scale: float, repeats: int, ps_cpu: float, threads: list[int],
                 root: Path, with_sync: bool) -> dict:  # fmt: skip
    steps = max(2 * WINDOW_STEPS, int(CASES[case][-1] * scale))
    spec = case_spec(root / case, case, steps, ps_cpu)
    sync = case_spec(root / case, case, steps, ps_cpu, overlap=False)
    runs = []
    for _ in range(repeats):
        plains = {n: plain(spec, steps, n) for n in threads}
        best = max(plains.values(), key=lambda r: r["median_samples_per_s"])
        run = {"plain": best, "plain_by_threads": plains, "ps": ps_run(spec)}
        if with_sync:
            run["ps_sync"] = ps_run(sync)
        runs.append(run)
    ratios = [r["ps"]["median_samples_per_s"] / r["plain"]["median_samples_per_s"] for r in runs]
    sync_ratios = [r["ps_sync"]["median_samples_per_s"] / r["plain"]["median_samples_per_s"]
                   for r in runs if "ps_sync" in r]  # fmt: skip
    by_threads = {n: statistics.median(r["plain_by_threads"][n]["median_samples_per_s"]
                                       for r in runs) for n in threads}  # fmt: skip
    sizes = model_bytes(spec)
    per_step = median_or_none([r["ps"]["worker_bytes_per_step"] for r in runs
                               if r["ps"]["worker_bytes_per_step"]])  # fmt: skip
    result = {
        "case": case, "job": job_identity(spec), "workload": spec.workload,
        "batch_size": spec.batch_size, "steps": steps, "ps_cpu": ps_cpu,
        "worker_cpu": spec.initial_shape.workers.cpu, "runs": runs,
        "ps_over_plain": statistics.median(ratios), "ps_over_plain_each": ratios,
        "ps_sync_over_plain": median_or_none(sync_ratios), "ps_sync_over_plain_each": sync_ratios,
        "plain_median_samples_per_s_by_threads": by_threads,
        "worker_bytes_per_step": per_step, **sizes,
        "bytes_per_step_over_dense_bytes": per_step / sizes["dense_bytes"] if per_step else None,
    }  # fmt: skip
    sync_note = f" (sync {result['ps_sync_over_plain']:.2f})" if sync_ratios else ""
    print(f"{case:>10}: ps/plain {result['ps_over_plain']:.2f}{sync_note}  bytes/step "
          f"{per_step or 0:,.0f} (dense model {sizes['dense_bytes']:,} B)", file=sys.stderr)  # fmt: skip
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--cases", default=",".join(CASES), help="comma-separated: " + ", ".join(CASES)
    )
    parser.add_argument("--scale", type=float, default=1.0, help="times each case's steps")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--plain-threads",
        default=f"1,{os.cpu_count() or 1}",
        help="torch thread counts tried for plain training (the faster counts)",
    )
    parser.add_argument("--ps-cpu", type=float, default=0.5,
                        help="the PS's CPU; the worker gets the rest of the cores")  # fmt: skip
    parser.add_argument("--no-sync", action="store_true",
                        help="skip the runs with runtime.overlap off")  # fmt: skip
    parser.add_argument("--quick", action="store_true", help="one short repeat: checks it works")
    parser.add_argument("--out", default="benchmarks/results/runtime_throughput.json")
    args = parser.parse_args(argv)
    scale, repeats = (0.2, 1) if args.quick else (args.scale, args.repeats)
    before = load_note()
    with tempfile.TemporaryDirectory(prefix="rightsize-bench-") as tmp:
        threads = sorted({int(n) for n in args.plain_threads.split(",")})
        cases = [measure_case(c, scale, repeats, args.ps_cpu, threads, Path(tmp), not args.no_sync)
                 for c in args.cases.split(",")]  # fmt: skip
    report = {
        "benchmark": "runtime_throughput",
        "command": "python benchmarks/runtime_throughput.py " + " ".join(argv or sys.argv[1:]),
        "simulated": False,
        "load_before": before,
        "load_after": load_note(),
        "cases": cases,
    }
    write_report(args.out, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
