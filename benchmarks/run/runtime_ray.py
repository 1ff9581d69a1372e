"""The same job on the local backend and on a Ray cluster on this host (issue 21).

Two measurements per backend, the backends alternating (local, ray, local, ray, ...
for ``--repeats``) so that the shared machine's drift falls on both alike:

- **Throughput**: the Wide & Deep PS job (1 PS + 2 workers of 0.5 CPU) under the
  static policy for ``--steps`` steps; the median steps/s after warm-up.
- **Transitions**: the elastic cycle of benchmarks/run/runtime_elastic.py on the same
  job — launch (with worker-1 OOM-killed at start and relaunched with double the
  memory), a worker resized up and down, a worker added and removed, a PS added,
  removed and replaced — each operation's transition time as the runtime measures it.
  On Ray, then, the Ray node holding the PS is killed (raylet and all): the time to
  notice and to run the whole shape again.

The Ray cluster (``ray.cluster_utils.Cluster``: a head for the driver and
``--ray-nodes`` nodes of 2 CPUs each, as many as this machine has) is started once;
its start-up time is reported apart. Every node's CPU quota is its cgroup's on this
host either way, so the difference is Ray's own cost: placement groups, actors,
and Ray's processes on the same cores.

    python benchmarks/run/runtime_ray.py --out benchmarks/results/runtime_ray.json
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root: `benchmarks.`
from benchmarks.lib.envelope import write_report
from benchmarks.lib.job import job_spec, run_job
from benchmarks.lib.load import load_note
from benchmarks.lib.repeats import steady
from benchmarks.run.runtime_elastic import (
    Cycler,
    ElasticBench,
    cycle,
    fault_recoveries,
    summarize,
    transitions,
)
from rightsize.scaling.registry import make_policy

MI, GI = 2**20, 2**30
SHAPE = {"ps": {"count": 1, "cpu": 0.5, "memory": "1Gi"},
         "workers": {"count": 2, "cpu": 0.5, "memory": "1Gi"}}  # fmt: skip


def start_cluster(nodes: int):
    import ray
    from ray.cluster_utils import Cluster

    t0 = time.monotonic()
    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 0, "include_dashboard": False, "object_store_memory": 80 * MI})  # fmt: skip
    for _ in range(nodes):
        cluster.add_node(num_cpus=os.cpu_count() or 2, memory=6 * GI, object_store_memory=80 * MI)
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, log_to_driver=False, namespace="rightsize")
    return cluster, time.monotonic() - t0


def runtime_of(backend: str, cluster) -> dict:
    runtime = {"metric_interval": "1s", "max_restarts": 8, "backend": backend}
    if backend == "ray":
        runtime["ray_address"] = cluster.address
    return runtime


def throughput(backend: str, cluster, directory: Path, steps: int) -> dict:
    spec = job_spec(directory, name=f"tp-{backend}", steps=steps, initial_shape=SHAPE,
                    budget={"cpu": os.cpu_count() or 1, "memory": "8Gi"},
                    runtime=runtime_of(backend, cluster))  # fmt: skip
    _, report, _ = run_job(spec, make_policy("static"))
    rates = steady([s["steps_per_s"] for s in report["throughput"] if s["steps_per_s"]])
    launch = next(t for t in report["timeline"] if t["action"] == "launch")
    return {"steps_per_s": statistics.median(rates), "launch_s": launch["transition_s"],
            "wall_time_s": report["wall_time_s"],
            "exactly_once": report["accounting"]["exactly_once"]}  # fmt: skip


def lose_ps_host(cluster, master_of):
    """A fault step: kill the Ray node that holds the first PS (its raylet and processes)."""

    def strike(shape) -> None:
        ray_node = master_of().backend.nodes[shape.ps[0].name].ray_node
        victim = next(n for n in cluster.list_all_nodes() if n.node_id == ray_node)
        cluster.remove_node(victim, allow_graceful=False)

    return ("lose_ray_node", None, strike)


def elastic(backend: str, cluster, directory: Path, cycles: int, settle_s: float) -> dict:
    spec = job_spec(directory, name=f"el-{backend}", epochs=10_000, steps=None,
                    budget={"cpu": os.cpu_count() or 1, "memory": "16Gi"}, initial_shape=SHAPE,
                    runtime=runtime_of(backend, cluster))  # fmt: skip
    master = None
    steps = cycle() * cycles
    if backend == "ray":
        steps.append(lose_ps_host(cluster, lambda: master))
    policy = Cycler(steps, settle_s)
    master = ElasticBench(spec, policy, fresh=True, warn=lambda _: None)
    report = master.run()
    rows = transitions(report)
    resized = [r["details"] for r in rows if r["operation"].startswith("resize")]
    return {
        "transitions": summarize(rows),
        "resized_in_place": sum(len(d.get("resized_in_place", [])) for d in resized),
        "relaunched_to_resize": sum(len(d.get("relaunched_to_resize", [])) for d in resized),
        "faults": fault_recoveries(report, policy.faults),
        "exactly_once": report["accounting"]["exactly_once"],
        "isolation": report["isolation"],
    }  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--steps", type=int, default=600, help="steps of the throughput run")
    parser.add_argument("--cycles", type=int, default=1, help="elastic cycles per run")
    parser.add_argument("--settle", type=float, default=3.0)
    parser.add_argument("--ray-nodes", type=int, default=3)
    parser.add_argument("--out", default="benchmarks/results/runtime_ray.json")
    args = parser.parse_args(argv)
    before = load_note()
    cluster, cluster_s = start_cluster(args.ray_nodes)
    runs: dict[str, list] = {"local": [], "ray": []}
    try:
        with tempfile.TemporaryDirectory(prefix="rightsize-ray-bench-") as tmp:
            for repeat in range(args.repeats):
                for backend in ("local", "ray"):
                    if backend == "ray" and len(cluster.list_all_nodes()) < args.ray_nodes + 1:
                        cluster.add_node(num_cpus=os.cpu_count() or 2, memory=6 * GI,
                                         object_store_memory=80 * MI)  # fmt: skip
                        cluster.wait_for_nodes()  # the node the last run's fault took
                    where = Path(tmp) / f"{backend}-{repeat}"
                    row = {"throughput": throughput(backend, cluster, where / "tp", args.steps),
                           "elastic": elastic(backend, cluster, where / "el", args.cycles,
                                              args.settle)}  # fmt: skip
                    print(f"{backend} #{repeat}: {row['throughput']['steps_per_s']:.1f} steps/s, "
                          f"launch {row['throughput']['launch_s']:.2f} s", file=sys.stderr)
                    runs[backend].append(row)
    finally:
        import ray

        ray.shutdown()
        cluster.shutdown()
    write_report(args.out, {
        "benchmark": "runtime_ray",
        "simulated": False,
        "load_before": before,
        "load_after": load_note(),
        "ray_cluster_start_s": cluster_s,
        "ray_nodes": args.ray_nodes,
        "summary": {b: summary(rows) for b, rows in runs.items()},
        "runs": runs,
    })  # fmt: skip
    return 0


def summary(rows: list[dict]) -> dict:
    """Medians over repeats: throughput, launch, and each operation's transition."""
    operations = sorted({op for r in rows for op in r["elastic"]["transitions"]})
    return {
        "steps_per_s": statistics.median(r["throughput"]["steps_per_s"] for r in rows),
        "steps_per_s_runs": [r["throughput"]["steps_per_s"] for r in rows],
        "launch_s": statistics.median(r["throughput"]["launch_s"] for r in rows),
        "transition_s": {op: statistics.median(r["elastic"]["transitions"][op]["median_transition_s"]
                                               for r in rows if op in r["elastic"]["transitions"])
                         for op in operations},  # fmt: skip
        "exactly_once": all(r["throughput"]["exactly_once"] and r["elastic"]["exactly_once"]
                            for r in rows),  # fmt: skip
    }


if __name__ == "__main__":
    sys.exit(main())
