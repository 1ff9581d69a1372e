"""``rightsize plan``: predicted time and cost of cloud configurations, and the best ones."""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence
from pathlib import Path

from rightsize.cli.args import bounded, forbid_together, ignored_unless
from rightsize.cli.output import format_table, print_json, progress_printer
from rightsize.cli.profiles import add_profile_arguments, resolve_profiles
from rightsize.cli.skypilot_export import (
    add_skypilot_arguments,
    exported_plan,
    node_command,
    write_launcher,
    write_task,
)
from rightsize.core.catalog import load_catalogs
from rightsize.core.errors import SpecError
from rightsize.core.limits import BATCH, COUNT, INSTANCES, ITERATIONS
from rightsize.core.spec import Constraints, Objective
from rightsize.core.units import format_duration, format_money, parse_duration, parse_money
from rightsize.perf.comm import AnalyticCommModel, CommModel
from rightsize.perf.comm_learned import LearnedCommModel
from rightsize.perf.ddp_overhead import DdpOverheadModel
from rightsize.perf.precision import Precision
from rightsize.perf.ps import PSModel
from rightsize.perf.ps_profiles import PSFramework
from rightsize.planning.estimate import DDP_PROBE, PLAN_EXCHANGES, PlanRequest
from rightsize.planning.fc2 import Fc2Request
from rightsize.planning.measured import HistoryFit, MeasuredSpeed
from rightsize.planning.options import ComputeMethod, DeviceChoice
from rightsize.planning.plan import CloudPlan, overlapping
from rightsize.planning.planner import parse_instances
from rightsize.planning.precision_alternatives import (
    SHOWN_ABOVE,
    PrecisionAlternative,
    device_modelled,
    precision_alternatives,
)
from rightsize.planning.precision_terms import PrecisionStatement, precision_statement
from rightsize.planning.ps_framework import PSFrameworkStatement, with_tensor_counts
from rightsize.planning.recommend import FC2_PS_TYPES, Market, fc2, srift
from rightsize.planning.skypilot import NodeCommand, task_shape
from rightsize.planning.skypilot_launcher import candidates
from rightsize.profiling.profile import Profile

#: Flags that only --strategy ps reads (FC2's recommenders).
PS_ONLY = ("ps_types", "budget_per_hour", "max_workers", "worker_type", "ps_model", "ps_framework")


def register(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Predict the iteration time, total time and total cost of cloud configurations "
        "for a workload (Srift: profile + comm model + iteration simulator) and search for the "
        "cheapest or fastest one that meets a deadline and/or budget, with the CAP and TAP "
        "baselines beside it, and, when the training precision changes its time or cost by "
        f"more than {SHOWN_ABOVE:.0%}, the best plans at --precision tf32 and amp. "
        "--strategy ps runs FC2's recommenders instead."
    )
    add_request_arguments(parser)
    parser.add_argument("--strategy", choices=["allreduce", "ps"], default="allreduce")
    parser.add_argument(
        "--mode",
        choices=["auto", "exhaustive", "eager"],
        default="auto",
        help="search mode (auto: exhaustive up to 4 instance types)",
    )
    parser.add_argument(
        "--ps-types", help=f"parameter-server candidates for --strategy ps (default {FC2_PS_TYPES})"
    )
    parser.add_argument(
        "--budget-per-hour", help="FC2's indicative hourly budget C for --strategy ps"
    )
    parser.add_argument(
        "--max-workers",
        type=bounded(INSTANCES),
        help="worker limit for --strategy ps (instead of a budget)",
    )
    parser.add_argument(
        "--worker-type", help="Scala-Opt-M's manually chosen worker type (--strategy ps)"
    )
    parser.add_argument(
        "--ps-model",
        choices=[m.value for m in PSModel],
        help="--strategy ps: dlrover (DLRover eq. 1 with FC2's PS network cap, default) or "
        "queueing (PS CPU per byte, link efficiency, mean-value analysis; perf/ps.py)",
    )
    parser.add_argument(
        "--ps-framework",
        choices=[f.value for f in PSFramework],
        help="--strategy ps: whose parameter server, which sets its service costs "
        "(perf/ps_profiles.py): rightsize (this project's runtime, default) or "
        "tensorflow1-grpc (TensorFlow 1.x's gRPC PS: one RPC per variable, a per-process "
        "byte ceiling)",
    )
    parser.add_argument(
        "--database", help="the store of past runs (URL or SQLite file; default "
        "$RIGHTSIZE_DATABASE or ~/.local/share/rightsize/rightsize.db, when it exists)"
    )  # fmt: skip
    parser.add_argument(
        "--no-history", action="store_true", help="predict every instance type from the "
        "profile, even those that past runs of this workload measured"
    )  # fmt: skip
    parser.add_argument(
        "--history-fit", choices=[f.value for f in HistoryFit], default=HistoryFit.INTERPOLATE,
        help="how past runs replace a type's prediction: interpolate the measured throughput "
        "between measured batches (default), or scale the profile's curve by one factor"
    )  # fmt: skip
    parser.add_argument(
        "--script", metavar="PATH", help="your own training script instead of a workload: "
        "planned from what its stored runs measured (rightsize torchrun --instance-type TYPE), "
        "on the types they ran on; the job is --iterations x --global-batch samples"
    )  # fmt: skip
    parser.add_argument(
        "--script-args", default="", metavar="ARGS",
        help="the script's arguments, as its runs had them (one string)"
    )  # fmt: skip
    add_skypilot_arguments(parser)
    parser.set_defaults(run=run)  # fmt: skip


def add_request_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments shared by plan and replan: the workload, the request, the instances."""
    add_profile_arguments(parser)
    parser.add_argument(
        "--global-batch",
        type=bounded(BATCH),
        required=True,
        help="samples per step over all VMs (per worker with --strategy ps)",
    )
    parser.add_argument(
        "--iterations", type=bounded(ITERATIONS), required=True, help="training steps N"
    )
    parser.add_argument("--deadline", help="time limit, e.g. 2h or 1h30m")
    parser.add_argument("--budget", help="money limit for the whole job, e.g. 30 or $30")
    parser.add_argument(
        "--objective",
        choices=[o.value for o in Objective],
        default="cost",
        help="what to minimise (default cost)",
    )
    parser.add_argument(
        "--cloud", action="append", metavar="NAME", help="catalog(s) to plan on (default aws)"
    )
    parser.add_argument("--region", help="region (default: the catalog's main region)")
    parser.add_argument(
        "--instances",
        default="",
        metavar="TYPE[:COUNT],...",
        help="instance types and how many of each are available (default: every GPU type, 16 each)",
    )
    parser.add_argument(
        "--spot", action="store_true", help="use spot prices (types without one are skipped)"
    )
    parser.add_argument(
        "--comm-model",
        metavar="FILE",
        help="learned comm model from rightsize probe (for hosts it was probed on)",
    )
    parser.add_argument(
        "--exchange",
        choices=PLAN_EXCHANGES,
        default="per-layer",
        help="per-layer: Srift as written (default); ddp-buckets: a PyTorch DDP step "
        "(buckets, bucket copies, optimizer); ddp-serial: the same with the exchange "
        "after backward (CPU hosts whose processes fill the cores); ddp-probe: compute + "
        "the DDP overhead measured by --ddp-probe on its host (ddp-serial elsewhere)",
    )
    parser.add_argument(
        "--ddp-probe", metavar="FILE", help="DDP probe from rightsize probe --ddp (for ddp-probe)"
    )
    parser.add_argument(
        "--precision",
        choices=[p.value for p in Precision],
        default=Precision.PYTORCH.value,
        help="training precision on GPUs: fp32, tf32, amp (mixed fp16/bf16), or pytorch "
        "(default: PyTorch's defaults, TF32 convolutions on Ampere and later, fp32 matmuls)",
    )
    parser.add_argument(
        "--compute-model",
        choices=[m.value for m in ComputeMethod],
        default=ComputeMethod.CALIBRATED_PER_OP.value,
        help="how GPUs without their own profile are predicted: calibrated-per-op (default; "
        "the device model fitted on published training throughput, each operation the step "
        "dispatches timed by its shape), calibrated (the same, one efficiency per operation "
        "class), ratio (the profile's time scaled by a roofline ratio, Srift's way) or "
        "absolute (roofline at 35%%)",
    )
    parser.add_argument("--top", type=bounded(COUNT), default=5, help="plans to show (default 5)")
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.add_argument("--quiet", action="store_true", help="no progress on stderr")


def device_choice(args: argparse.Namespace) -> DeviceChoice:
    return DeviceChoice(ComputeMethod(args.compute_model), Precision(args.precision))


def comm_model(path: str | None, notes: list[str] | None = None) -> CommModel:
    """The comm model to plan with: the learned one from ``path`` unless it predicted its own
    probes worse than the analytic model (then the analytic one, and a line in ``notes``)."""
    if not path:
        return AnalyticCommModel()
    chosen, note = LearnedCommModel.load(path).or_analytic()
    if note and notes is not None:
        notes.append(note)
    return chosen


def request_from(args: argparse.Namespace) -> PlanRequest:
    constraints = Constraints(
        deadline_s=parse_duration(args.deadline, "--deadline") if args.deadline else None,
        budget_usd=parse_money(args.budget, "--budget") if args.budget else None,
    )
    if (args.exchange == DDP_PROBE) != bool(args.ddp_probe):
        raise SpecError(
            "--exchange ddp-probe and --ddp-probe FILE go together "
            "(make the file with: rightsize probe --ddp FILE)"
        )
    return PlanRequest(
        args.global_batch, args.iterations, constraints, Objective(args.objective), args.exchange,
        ddp_probe=DdpOverheadModel.load(args.ddp_probe) if args.ddp_probe else None,
    )  # fmt: skip


def run(args: argparse.Namespace) -> int:
    # every input is checked, and every file read, before a profile may be measured
    ignored_unless(args, PS_ONLY, args.strategy == "ps", "with --strategy ps")
    command = node_command(args)
    progress = progress_printer(args.quiet)
    market = Market.of(load_catalogs(args.cloud or ["aws"]), args.instances, spot=args.spot,
                       region=args.region, device=device_choice(args))  # fmt: skip
    request = request_from(args)
    if args.script:
        return _run_script(args, market, request)
    notes: list[str] = []
    comm = comm_model(args.comm_model, notes)
    history = history_store(args)
    if args.strategy == "ps":
        fc2 = _fc2_request(args, market, request)
        return _run_fc2(args, resolve_profiles(args, progress), market, fc2, command)
    profiles = resolve_profiles(args, progress)
    speeds = past_speeds(history, profiles[0], "allreduce")
    progress(f"searching {len(market.caps) or 'every GPU'} instance types")
    found = srift(profiles, market, request, comm, args.mode, args.top, speeds,
                  HistoryFit(args.history_fit))  # fmt: skip
    result = found.result
    header = (f"{request.iterations} iterations at global batch {request.global_batch}, "
              f"minimising {request.objective.value} ({result.mode} search)")  # fmt: skip
    statement = stated_precision(market, found.options)
    if device_modelled(found.options):
        progress("planning again at the other precisions")
    alternatives = precision_alternatives(
        profiles, market, request, comm, result.plans[0], found.options, result.mode, args.top,
        speeds, HistoryFit(args.history_fit))  # fmt: skip
    status = print_plans(result.plans + result.baselines, header, args.json,
                         request.objective.value, notes + found.notes, statement,
                         alternatives)  # fmt: skip
    if command is not None:
        best = result.plans[0]
        exported = exported_plan(best, found.options, comm, request)
        instances = {o.name: o.instance for o in found.options}
        shape = task_shape(exported, instances, args.spot, best)
        task_file = write_task(args.skypilot_yaml, shape, command, args.spot)
        if args.launcher:
            write_launcher(args.launcher, task_file, shape,
                           candidates(shape, found.options, comm, request), args.spot,
                           statement.line())  # fmt: skip
    return status


def _run_script(args: argparse.Namespace, market: Market, request: PlanRequest) -> int:
    """``--script``: the types its stored runs measured, one VM each at the measured speed."""
    import shlex

    from rightsize.core.spec import parse_job_spec
    from rightsize.planning.measured_script import measured_plans
    from rightsize.runtime.script_check import check_script
    from rightsize.service.history import script_speeds
    from rightsize.service.store import Store

    forbid_together(args, "script", ["profile", "workload", "dataset", "option"],
                    "a script is planned from its runs, not from a profile")  # fmt: skip
    spec = parse_job_spec({"script": args.script, "args": shlex.split(args.script_args),
                           "budget": {"cpu": 1, "memory": "1Gi"}}, "--script")  # fmt: skip
    check_script(spec)
    url = history_store(args)
    if url is None:
        raise SpecError("--script: no store of past runs here; run the script with "
                        "rightsize torchrun --instance-type TYPE first")  # fmt: skip
    store = Store(url)
    try:
        speeds = script_speeds(store, spec)
    finally:
        store.close()
    if not speeds:
        raise SpecError(f"--script: no finished run of {args.script} with these arguments "
                        "declared its instance type (rightsize torchrun --instance-type TYPE)")  # fmt: skip
    samples = request.global_batch * request.iterations
    plans = measured_plans(speeds, market.instance, samples, request.constraints,
                           request.objective, market.spot)  # fmt: skip
    if args.json:
        print_json([p.to_dict() for p in plans[: args.top]])
        return 0
    print(f"{samples:,} samples of {args.script}, from its measured runs (one VM of each type "
          "they ran on; other types need a profile)")  # fmt: skip
    rows = [(p.instance_type, p.vms, f"{p.samples_per_s:.4g}", format_duration(p.time_s),
             format_money(p.cost_usd), ", ".join(p.measured_by)
             + (f" (scaled from {p.scaled_from_cores:g} cores)" if p.scaled_from_cores else ""))
            for p in plans[: args.top]]  # fmt: skip
    print(format_table(("type", "VMs", "samples/s", "time", "cost", "measured by"), rows))
    return 0 if plans else 1


def history_store(args: argparse.Namespace) -> str | None:
    """The store of past runs to read (None with --no-history, or when the default store does
    not exist yet: planning never creates one).

    Raises:
        SpecError: --database names a SQLite file that does not exist.
    """
    if args.no_history:
        return None
    from rightsize.service.db import as_url, default_url

    url = as_url(args.database) if args.database else default_url()
    if url.startswith("sqlite:///") and not Path(url.removeprefix("sqlite:///")).exists():
        if args.database:
            raise SpecError(f"--database {args.database}: no such store")
        return None
    return url


def past_speeds(url: str | None, profile: Profile, strategy: str) -> list[MeasuredSpeed]:
    """What the store's finished runs of the profiled workload measured per instance type."""
    if url is None:
        return []
    from rightsize.service.history import measured_speeds
    from rightsize.service.store import Store

    store = Store(url)
    try:
        return measured_speeds(store, profile.workload, profile.dataset, dict(profile.options),
                               strategy)  # fmt: skip
    finally:
        store.close()


def stated_precision(market: Market, options: Sequence) -> PrecisionStatement:
    """What the plans' precision assumes on the GPUs the device model predicted for them."""
    gpus = [o.instance.accelerator for o in device_modelled(options)]
    return precision_statement(market.device.precision, gpus)


def print_plans(plans: list[CloudPlan], header: str, as_json: bool,
                objective: str | None = None, notes: Sequence[str] = (),
                precision: PrecisionStatement | None = None,
                alternatives: Sequence[PrecisionAlternative] | None = None,
                ps_framework: PSFrameworkStatement | None = None) -> int:  # fmt: skip
    """The plans as a table under ``header``, or as a JSON list of objects; with
    ``objective``, a note when the next plans lie within the best plan's interval;
    ``notes`` (what the plans rest on that the user should know) under the header, or
    on stderr with JSON; ``precision`` and ``ps_framework``, what the predictions assume,
    under the header and in every plan's JSON; ``alternatives``, the first plan at other
    precisions, under the table and in the first plan's JSON (None: not planned, e.g. FC2's)."""
    if as_json:
        for note in notes:
            print(f"note: {note}", file=sys.stderr)
        rows = [p.to_dict() for p in plans]
        for row in rows if precision else ():
            row["precision"] = precision.to_dict()
        for row in rows if ps_framework else ():
            row["ps_framework"] = ps_framework.to_dict()
        if rows and alternatives is not None:
            rows[0]["precision_alternatives"] = [a.to_dict() for a in alternatives]
        print_json(rows)
        return 0
    print(header)
    for statement in (precision, ps_framework):
        if statement:
            print(statement.line())
    for note in notes:
        print(f"note: {note}")
    print(format_table(
        ["policy", "configuration", "s/iter", "total time", "total cost", "$/h", "models"],
        [[p.policy, str(p.config), f"{p.seconds_per_iter:.4g}", format_duration(p.total_seconds),
          format_money(p.total_cost), f"{p.price_per_hour:.4g}",
          "; ".join(f"{k}: {v}" for k, v in p.models.items())] for p in plans],
    ))  # fmt: skip
    ranked = [p for p in plans if p.policy == plans[0].policy] if plans else []
    close = overlapping(ranked, objective) if objective else []
    if close:
        factor = math.exp(ranked[0].log_spread or 0.0)
        print(f"note: plan{'s' if len(close) > 1 else ''} {', '.join(str(i + 1) for i in close)} "
              f"within the first plan's {objective} interval (x/÷ {factor:.2f}, the device "
              "model's held-out error): their order is uncertain")  # fmt: skip
    if alternatives:
        print_alternatives(alternatives)
    return 0


def print_alternatives(alternatives: Sequence[PrecisionAlternative]) -> None:
    """The first plan's alternatives at other precisions, each planned by the same search."""
    print(f"\nat another precision (the same search; shown when the time or the cost differs "
          f"from plan 1's by more than {SHOWN_ABOVE:.0%}):")  # fmt: skip
    print(format_table(
        ["precision", "configuration", "s/iter", "total time", "total cost", "vs plan 1"],
        [[f"--precision {a.precision.value}", str(a.plan.config), f"{a.plan.seconds_per_iter:.4g}",
          format_duration(a.plan.total_seconds), format_money(a.plan.total_cost),
          f"time {a.time_change:+.0%}, cost {a.cost_change:+.0%}"] for a in alternatives],
    ))  # fmt: skip


def _fc2_request(args, market: Market, request: PlanRequest) -> Fc2Request:
    budget = (
        parse_money(args.budget_per_hour, "--budget-per-hour") if args.budget_per_hour else None
    )
    if not market.caps:
        raise SpecError("--strategy ps needs the worker candidates in --instances (FC2's list L^w)")
    if args.worker_type:
        market.catalog.get(args.worker_type)
    parse_instances(args.ps_types or FC2_PS_TYPES, market.catalog, "--ps-types")
    return Fc2Request(request.global_batch, request.iterations, budget, args.max_workers,
                      ps_model=PSModel(args.ps_model or PSModel.DLROVER),
                      ps_framework=PSFramework(args.ps_framework or PSFramework.RIGHTSIZE))  # fmt: skip


def _run_fc2(args, profiles, market: Market, request: Fc2Request,
             command: NodeCommand | None) -> int:  # fmt: skip
    label = f"profile {args.profile[0]}" if args.profile else "the profile"
    profiles = [with_tensor_counts(profiles[0], request.ps_framework, label), *profiles[1:]]
    found = fc2(profiles, market, request, args.ps_types or FC2_PS_TYPES, args.worker_type)
    header = (f"{found.header}, worker batch {request.worker_batch}, "
              f"{request.iterations} global steps")  # fmt: skip
    status = print_plans(found.plans, header, args.json,
                         precision=stated_precision(market, found.workers),
                         ps_framework=PSFrameworkStatement(request.ps_framework))  # fmt: skip
    if command is not None:  # FC2's recommenders are not ranked: export the best by --objective
        by_time = Objective(args.objective) == Objective.TIME
        chosen = min(found.plans, key=lambda p: p.total_seconds if by_time else p.total_cost)
        instances = {o.name: o.instance for o in found.workers} | {found.ps.name: found.ps}
        write_task(args.skypilot_yaml, task_shape(chosen, instances, args.spot), command, args.spot)
    return status
