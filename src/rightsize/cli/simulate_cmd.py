"""``rightsize simulate``: compare autoscaling policies on a simulated cluster (NEARCHUS §V).

Two experiments: a trace of many jobs sharing a cluster (``--trace``), and one
job alone (``--job MODEL --budget CPU``). Every result is simulated and says so.
"""

from __future__ import annotations

import argparse
import sys

from rightsize.cli.args import bounded, parse_options, require_together
from rightsize.cli.output import format_table, print_json, progress_printer
from rightsize.cluster.clusters import parse_cluster
from rightsize.cluster.config import SimConfig
from rightsize.cluster.jobmodel import ClusterSpec
from rightsize.cluster.links import LINK_SHARING, OBSERVED_LINK
from rightsize.cluster.models import model_names
from rightsize.cluster.report import (
    SIMULATED_NOTE,
    multi_job_rows,
    multi_job_table,
    run_policies,
    single_job_rows,
    single_job_table,
)
from rightsize.cluster.traces import (
    BUILTIN_TRACES,
    EPOCHS,
    WORK_SCALE,
    Trace,
    check_fits,
    load_trace,
    single_job,
)
from rightsize.core.errors import SpecError
from rightsize.core.files import check_output_dir
from rightsize.core.limits import SEED
from rightsize.core.units import parse_cpu
from rightsize.scaling.api import Policy
from rightsize.scaling.registry import COMPARED, policies_named, policy_names

DEFAULT_POLICIES = ",".join(COMPARED)
DEFAULT_EPOCHS = 300.0


def register(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Run a trace of jobs (or one job) on a simulated parameter-server cluster "
        "under several autoscaling policies and compare job completion time, queueing, "
        "utilization and restarts (NEARCHUS §V). Results are simulated, not measured. "
        f"Policies: {', '.join(policy_names())}. Models: {', '.join(model_names())}."
    )
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument(
        "--trace",
        metavar="NAME|CSV",
        help=f"built-in trace ({', '.join(BUILTIN_TRACES)}), a Pollux-format CSV "
        "(name,time,application,num_replicas,batch_size) or a CSV with arrival, duration, cpu",
    )
    what.add_argument("--job", metavar="MODEL", help="one job of this simulated model, alone")
    parser.add_argument("--budget", metavar="CPU", help="the single job's budget in vCPU")
    parser.add_argument(
        "--epochs",
        type=bounded(EPOCHS),
        default=DEFAULT_EPOCHS,
        help=f"the single job's CIFAR-10-sized epochs ({EPOCHS.rule()}; default %(default)g)",
    )
    parser.add_argument(
        "--cluster",
        default="A",
        help="A (100 vCPU, 1 Gbps), B (300 vCPU, 50 Gbps) or cpu=N,net_gbps=G[,server_cores=C]",
    )
    parser.add_argument(
        "--policies", default=DEFAULT_POLICIES, help="comma-separated (default %(default)s)"
    )
    parser.add_argument(
        "--param",
        action="append",
        default=[],
        metavar="POLICY:KEY=VALUE",
        help="a policy parameter, e.g. nearchus:r_up=0.3 (repeatable)",
    )
    parser.add_argument(
        "--seed", type=bounded(SEED), default=1, help="trace and noise seed (default 1)"
    )
    parser.add_argument("--order", choices=("fcfs", "sjf"), default="fcfs", help="queue order")
    parser.add_argument(
        "--link-sharing",
        choices=LINK_SHARING,
        default="job",
        help="who shares the servers' links: each job as if alone (default) or every "
        "training job's nodes",
    )
    parser.add_argument(
        "--observed-link",
        choices=OBSERVED_LINK,
        default=SimConfig.observed_link,
        help="the link capacity node metrics report (NEARCHUS's PSN check): the server's "
        "whole link (default) or the share the node trains at",
    )
    parser.add_argument(
        "--work-scale",
        type=bounded(WORK_SCALE),
        default=1.0,
        help="Pollux traces: fraction of each application's epochs to run "
        f"({WORK_SCALE.rule()}; default 1)",
    )
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.add_argument("--per-job", action="store_true", help="include every job in the JSON")
    parser.add_argument("--plots", metavar="DIR", help="write PNG plots into DIR")
    parser.add_argument("--plot-job", metavar="NAME", help="the job whose speed --plots draws")
    parser.add_argument("--quiet", action="store_true", help="no progress on stderr")
    parser.set_defaults(run=run)


def _policy_params(pairs: list[str], names: list[str]) -> dict[str, dict]:
    params: dict[str, dict] = {name: {} for name in names}
    for pair in pairs:
        policy, sep, option = pair.partition(":")
        if not sep or policy not in params:
            raise SpecError(
                f"--param {pair!r} must look like POLICY:KEY=VALUE with POLICY one of "
                f"--policies ({', '.join(names)})"
            )
        params[policy].update(parse_options([option]))
    return params


def build_policies(text: str, pairs: list[str]) -> list[Policy]:
    """Policies named in ``--policies`` with their ``--param`` values.

    Raises:
        UnknownNameError: an unknown policy.
        SpecError: an empty list, a repeated name or a bad parameter.
    """
    names = [name.strip() for name in text.split(",") if name.strip()]
    return policies_named(names, _policy_params(pairs, names))


def _trace(args: argparse.Namespace, cluster: ClusterSpec) -> Trace:
    trace = _load(args)
    check_fits(trace, cluster.capacity, cluster.name)
    return trace


def _load(args: argparse.Namespace) -> Trace:
    if args.job:
        if not args.budget:
            raise SpecError("--job needs --budget, e.g. --job resnet50 --budget 100")
        return single_job(args.job, parse_cpu(args.budget, "--budget"), args.epochs)
    if args.budget:
        raise SpecError("--budget is for --job; a trace gives each job its own budget")
    return load_trace(args.trace, seed=args.seed, work_scale=args.work_scale)


def run(args: argparse.Namespace) -> int:
    require_together(args, "plot_job", "plots", "it names the job whose speed is plotted")
    require_together(args, "per_job", "json", "it adds every job to the JSON")
    if args.plots:
        check_output_dir(args.plots, "--plots")
    cluster = parse_cluster(args.cluster)
    policies = build_policies(args.policies, args.param)
    trace = _trace(args, cluster)
    config = SimConfig(
        seed=args.seed,
        order=args.order,
        link_sharing=args.link_sharing,
        observed_link=args.observed_link,
    )
    progress = progress_printer(args.quiet or args.json)
    results = run_policies(trace, cluster, policies, config, progress)
    single = bool(args.job)
    rows = single_job_rows(results) if single else multi_job_rows(results)
    plots = []
    if args.plots:
        from rightsize.cluster.plots import write_plots  # matplotlib: only when plots are asked

        plots = write_plots(results, args.plots, args.plot_job)
    if args.json:
        out = {
            "simulated": True,
            "note": SIMULATED_NOTE,
            "command": "rightsize " + " ".join(sys.argv[1:]),
            "experiment": "single-job" if single else "multi-job",
            "trace": trace.name,
            "trace_source": trace.source,
            "cluster": cluster.name,
            "seed": args.seed,
            "results": rows,
            "plots": [str(p) for p in plots],
        }
        if args.per_job:
            out["jobs"] = {r.policy: [j.to_dict() for j in r.jobs] for r in results}
        print_json(out)
        return 0
    kind = "one job" if single else f"{len(trace.jobs)} jobs"
    print(f"{trace.name} ({kind}) on cluster {cluster.name}: {cluster.description}")
    headers, body = single_job_table(rows) if single else multi_job_table(rows)
    print(format_table(headers, body))
    print(f"\n{SIMULATED_NOTE}; seed {args.seed}")
    for path in plots:
        print(f"plot written to {path}")
    return 0
