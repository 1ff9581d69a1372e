"""NEARCHUS §V's experiments in the simulator: one job alone, and the 40-job trace, on A and B.

Every number this writes is **simulated** (``rightsize.cluster``'s model of
parameter-server training, not real jobs). For each cluster and seed it runs
every policy on the same trace and noise, then reports per policy the median
over seeds of each metric, and — the comparisons NEARCHUS makes — the median
over seeds of the per-seed ratios (average JCT against Optimus, average
queueing time against FA-BF, nearchus+ against nearchus). Ratios are taken
within one seed, so every policy sees the same arrivals.

    python benchmarks/schedule/schedule_experiments.py            # full: 5 seeds, 5 CNNs
    python benchmarks/schedule/schedule_experiments.py --quick    # 1 seed, ResNet-50 only

NEARCHUS and nearchus+ launch with at least 15 vCPU here (``launch_min_cores=15``):
§V-A starts NEARCHUS and Optimus alike at "(1ps, 2wk) and 15 vCPUs", and Optimus's
three 5-vCPU nodes are 15 vCPU whatever the budget. ``nearchus-r0-only`` is §IV's
launch at R0 = 15% of the budget alone (4.5 vCPU for a 30-vCPU job).

Variants are labelled policies with parameters, e.g. the literal reading of
the Resource Optimizer (all idle CPU moved): ``nearchus-all-idle=nearchus:reclaim_fraction=1``.

Both link-sharing models run side by side (``--link-sharing job,cluster``, ``cluster.links``):
each job as if alone on the servers' links, and every training job's nodes sharing them.
A lone job is the same under both, so the single-job tables are too (a check). So do both
link capacities the metrics report (``--observed-link server,share``): the server's whole
link, as NEARCHUS §IV words its PSN check, or the share each node trains at. Each pair is a
setting labelled ``SHARING/OBSERVED`` (``job/server``: the simulator's defaults).

    python benchmarks/schedule/schedule_experiments.py --clusters A --seeds 20 --policies nearchus,optimus
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root: `benchmarks.`
from benchmarks.lib.envelope import write_report
from benchmarks.lib.repeats import median_or_none
from rightsize.cli.args import parse_options
from rightsize.cluster.clusters import parse_cluster
from rightsize.cluster.config import SimConfig
from rightsize.cluster.links import LINK_SHARING, OBSERVED_LINK, LinkSharing, ObservedLink
from rightsize.cluster.models import NEARCHUS_CNNS
from rightsize.cluster.report import SIMULATED_NOTE
from rightsize.cluster.simulator import Simulator
from rightsize.cluster.traces import nearchus_trace, single_job
from rightsize.core.errors import choose
from rightsize.scaling.registry import make_policy

OUT = Path(__file__).resolve().parents[1] / "results" / "schedule_experiments.json"
POLICIES = ("nearchus", "nearchus+", "dlrover", "optimus", "fa-bf")
#: §V-A's common start, given to the NEARCHUS policies named plainly in ``--policies``.
SECTION_V_PARAMS = {"nearchus": {"launch_min_cores": 15.0}, "nearchus+": {"launch_min_cores": 15.0}}
VARIANTS = (
    "nearchus-all-idle=nearchus:reclaim_fraction=1,launch_min_cores=15",
    "nearchus-r0-only=nearchus:launch_min_cores=0",
)
# §V-A: "the same resource budget of 100 vCPUs for Cluster A and 300 vCPUs for Cluster B"
SINGLE_BUDGET_CORES = {"A": 100.0, "B": 300.0}
OTHER_SINGLE_BUDGET_CORES = 100.0  # a cluster §V does not name
SINGLE_EPOCHS = 300.0
MULTI_METRICS = ("avg_jct_s", "avg_queue_s", "avg_run_s", "makespan_s", "cpu_used_pct",
                 "restarts", "failed")  # fmt: skip
SINGLE_METRICS = ("best_steps_per_s", "jct_s", "time_to_95pct_s", "restarts")
# (name, metric, policy, baseline): NEARCHUS's headline comparisons, and ours.
COMPARISONS = (
    ("jct_vs_optimus", "jct", "nearchus", "optimus"),
    ("queue_vs_fa_bf", "queue", "nearchus", "fa-bf"),
    ("jct_vs_fa_bf", "jct", "nearchus", "fa-bf"),
    ("plus_jct_vs_optimus", "jct", "nearchus+", "optimus"),
    ("plus_queue_vs_fa_bf", "queue", "nearchus+", "fa-bf"),
    ("plus_jct_vs_fa_bf", "jct", "nearchus+", "fa-bf"),
    ("plus_jct_vs_nearchus", "jct", "nearchus+", "nearchus"),
)


def policies(names: list[str], variants: list[str]) -> dict[str, tuple[str, dict]]:
    """label -> (policy name, parameters), for plain names and ``label=policy:k=v,...``."""
    out: dict[str, tuple[str, dict]] = {
        name: (name, dict(SECTION_V_PARAMS.get(name, {}))) for name in names
    }
    for text in variants:
        label, _, spec = text.partition("=")
        name, _, params = spec.partition(":")
        out[label] = (name, parse_options(params.split(",")) if params else {})
    return out


def settings(sharing: str, observed: str) -> dict[str, dict]:
    """``SHARING/OBSERVED`` label -> SimConfig fields, for every pair of the comma lists."""
    return {
        f"{s}/{o}": {"link_sharing": choose(LinkSharing, s, "link sharing"),
                   "observed_link": choose(ObservedLink, o, "observed link")}
        for s in sharing.split(",")
        for o in observed.split(",")
    }


def run_all(trace, cluster, labelled, seed: int, setting: dict) -> dict:
    """Each labelled policy on ``trace`` with ``seed`` and ``setting``: label -> SimResult."""
    config = SimConfig(seed=seed, **setting)
    return {
        label: Simulator(cluster, make_policy(name, **params), config).run(trace)
        for label, (name, params) in labelled.items()
    }


def change(value: float, base: float) -> float | None:
    return (value - base) / base if base else None


def comparisons(per_seed: list[dict], keys: dict[str, str]) -> dict:
    """Median over seeds of each comparison's relative change (negative: the policy is lower)."""
    out = {}
    for name, metric, policy, base in COMPARISONS:
        key = keys.get(metric)
        if key and per_seed and policy in per_seed[0] and base in per_seed[0]:
            ratios = [change(row[policy][key], row[base][key]) for row in per_seed]
            out[name] = {"median": median_or_none(ratios), "per_seed": ratios}
    return out


def summarize(per_seed: list[dict], metrics: tuple[str, ...]) -> dict:
    labels = per_seed[0].keys() if per_seed else ()
    return {
        label: {m: median_or_none([row[label][m] for row in per_seed]) for m in metrics} for label in labels
    }


def multi_job(cluster_name: str, labelled, seeds: list[int], setting: dict, log) -> dict:
    cluster = parse_cluster(cluster_name)
    per_seed = []
    for seed in seeds:
        log(f"40-job trace, cluster {cluster_name}, seed {seed}, {setting}")
        results = run_all(nearchus_trace(seed), cluster, labelled, seed, setting)
        per_seed.append({label: r.summary() for label, r in results.items()})
    keys = {"jct": "avg_jct_s", "queue": "avg_queue_s"}
    return {
        "medians": summarize(per_seed, MULTI_METRICS),
        "comparisons": comparisons(per_seed, keys),
        "per_seed": per_seed,
    }


def single_budget(cluster_name: str) -> float:
    """The single job's budget on ``cluster_name`` (§V-A: 100 vCPU on A, 300 on B)."""
    return SINGLE_BUDGET_CORES.get(cluster_name, OTHER_SINGLE_BUDGET_CORES)


def single(cluster_name: str, model: str, labelled, seeds: list[int], setting: dict, log) -> dict:
    cluster = parse_cluster(cluster_name)
    trace = single_job(model, single_budget(cluster_name), SINGLE_EPOCHS)
    per_seed = []
    for seed in seeds:
        log(f"single job {model}, cluster {cluster_name}, seed {seed}, {setting}")
        results = run_all(trace, cluster, labelled, seed, setting)
        rows = {}
        for label, result in results.items():
            job = result.jobs[0]
            rows[label] = {
                "best_steps_per_s": job.best_steps_per_s,
                "jct_s": job.jct_s,
                "time_to_95pct_s": job.time_to_reach_s,
                "restarts": job.restarts,
                "final_shape": job.final_shape,
            }
        per_seed.append(rows)
    return {
        "medians": summarize(per_seed, SINGLE_METRICS),
        "comparisons": comparisons(per_seed, {"jct": "jct_s"}),
        "per_seed": per_seed,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1 seed, ResNet-50 only")
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--clusters", default="A,B")
    parser.add_argument("--policies", default=",".join(POLICIES))
    parser.add_argument("--variant", action="append", default=None, metavar="LABEL=POLICY:K=V")
    parser.add_argument("--link-sharing", default=",".join(LINK_SHARING),
                        help="link-sharing models to run, side by side (job, cluster)")  # fmt: skip
    parser.add_argument("--observed-link", default=",".join(OBSERVED_LINK),
                        help="link capacities the metrics report, side by side (server, share)")  # fmt: skip
    parser.add_argument("--no-single", action="store_true", help="the 40-job trace only")
    parser.add_argument("--out", default=str(OUT))
    args = parser.parse_args(argv)
    seeds = list(range(1, 2 if args.quick else args.seeds + 1))
    models = () if args.no_single else ("resnet50",) if args.quick else NEARCHUS_CNNS
    variants = list(VARIANTS) if args.variant is None else args.variant
    labelled = policies(args.policies.split(","), variants)
    clusters = args.clusters.split(",")
    modes = settings(args.link_sharing, args.observed_link)
    started = time.perf_counter()

    def log(message: str) -> None:
        print(f"[{time.perf_counter() - started:6.1f}s] {message}", file=sys.stderr, flush=True)

    data = {
        "simulated": True,
        "note": SIMULATED_NOTE,
        "seeds": seeds,
        "policies": {label: [name, params] for label, (name, params) in labelled.items()},
        "settings": modes,
        "single_job": {
            "budget_cpu": {c: single_budget(c) for c in clusters},
            "epochs": SINGLE_EPOCHS,
            "results": {
                mode: {
                    c: {m: single(c, m, labelled, seeds, setting, log) for m in models}
                    for c in clusters
                }
                for mode, setting in modes.items()
            },
        },
        "multi_job": {
            mode: {c: multi_job(c, labelled, seeds, setting, log) for c in clusters}
            for mode, setting in modes.items()
        },
    }
    data["wall_s"] = time.perf_counter() - started
    write_report(args.out, data, indent=1)
    print_summary(data)
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


def _fmt(value: float | None, scale: float = 1.0, pattern: str = "{:.2f}") -> str:
    return "-" if value is None else pattern.format(value / scale)


def print_summary(data: dict) -> None:
    """Median tables on stdout (hours; changes as percentages), one set per setting (link
    sharing / observed link), then the headline comparisons of the settings side by side."""
    print(f"# {data['note']}; seeds {data['seeds']}")
    for mode in data["settings"]:
        print(f"\n## links shared per {mode.replace('/', ', metrics against the ')} link")
        print_multi(data["multi_job"][mode])
        print_single(data["single_job"]["results"][mode], data["single_job"]["budget_cpu"])
    print_sharing_comparison(data)


def print_sharing_comparison(data: dict) -> None:
    modes = list(data["settings"])
    print("\n40-job comparisons by link sharing / observed link (medians over seeds)")
    print(f"{'cluster':8} {'comparison':22} " + " ".join(f"{m:>14}" for m in modes))
    first = data["multi_job"][modes[0]]
    for cluster, block in first.items():
        for name in block["comparisons"]:
            values = [data["multi_job"][m][cluster]["comparisons"][name]["median"] for m in modes]
            cells = " ".join(f"{_fmt(v, 0.01, '{:+.1f}%'):>14}" for v in values)
            print(f"{cluster:8} {name:22} {cells}")


def print_multi(multi: dict) -> None:
    for cluster, block in multi.items():
        print(f"\n40-job trace, cluster {cluster} (medians over seeds)")
        print(
            "policy               avg JCT h  avg queue h  avg run h  makespan h  CPU used %  restarts"
        )
        for label, m in block["medians"].items():
            print(f"{label:20} {_fmt(m['avg_jct_s'], 3600):>9}  {_fmt(m['avg_queue_s'], 3600):>11}"
                  f"  {_fmt(m['avg_run_s'], 3600):>9}  {_fmt(m['makespan_s'], 3600):>10}"
                  f"  {_fmt(m['cpu_used_pct'], 1, '{:.1f}'):>10}  {_fmt(m['restarts'], 1, '{:.0f}'):>8}")  # fmt: skip
        for name, c in block["comparisons"].items():
            print(f"  {name:22} {_fmt(c['median'], 0.01, '{:+.1f}%')}")


def print_single(results: dict, budget_cpu: dict[str, float]) -> None:
    for cluster, models in results.items():
        if not models:
            continue
        print(f"\nsingle job, budget {budget_cpu[cluster]:g} cpu, cluster {cluster}")
        print("model        policy               best steps/s  JCT h  to 95% h  restarts")
        for model, block in models.items():
            for label, m in block["medians"].items():
                print(f"{model:12} {label:20} {_fmt(m['best_steps_per_s']):>12}"
                      f"  {_fmt(m['jct_s'], 3600):>5}  {_fmt(m['time_to_95pct_s'], 3600):>8}"
                      f"  {_fmt(m['restarts'], 1, '{:.0f}'):>8}")  # fmt: skip
            changes = ", ".join(
                f"{name} {_fmt(c['median'], 0.01, '{:+.1f}%')}"
                for name, c in block["comparisons"].items()
            )
            print(f"{'':12} JCT changes (median over seeds): {changes}")


if __name__ == "__main__":
    raise SystemExit(main())
