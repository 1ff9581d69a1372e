"""``rightsize probe``: measure allreduce bandwidth here and train the learned comm model,
or (``--ddp FILE``) measure what a DDP step costs beyond its compute (``profiling/ddp_probe.py``)."""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from rightsize.cli.args import bounded, parse_count_list
from rightsize.cli.output import format_table, print_json, progress_printer
from rightsize.core.files import atomic_write_text, check_output_path
from rightsize.core.limits import REPEATS, Bound
from rightsize.core.units import format_bytes, parse_memory
from rightsize.perf.comm_learned import LearnedCommModel
from rightsize.perf.ddp_overhead import DdpOverheadModel

ROUNDS = Bound(1, 100, integer=True)  # fresh process groups: a handful shows the spread
#: Seconds timed per point: a minute per point is already hours per grid.
MIN_SECONDS = Bound(0, 60)
#: A rated link: at most 10 Tbit/s, beyond any NIC made.
RATED_GBPS = Bound(0, 10**4)
#: Concurrent transfers: a DDP step has a few buckets in flight; 64 is far beyond.
CONCURRENCY = Bound(1, 64, integer=True)


def register(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Run real allreduce operations through torch.distributed (gloo on CPU, NCCL "
        "with CUDA) among local processes over buffer sizes in powers of two and the given world "
        "sizes, record Srift's bus bandwidth with its features, and train the learned model "
        "(two gradient-boosted models split at the MTU, chosen by cross-validated MAPE)."
    )
    parser.add_argument(
        "--world-sizes", default="2,3,4", help="comma-separated world sizes (default %(default)s)"
    )
    parser.add_argument("--min-size", default="4", help="smallest buffer (default 4 bytes)")
    parser.add_argument("--max-size", default="512Mi", help="largest buffer (default %(default)s)")
    parser.add_argument(
        "--concurrency", default="1,2", help="concurrent transfers to probe (default %(default)s)"
    )
    parser.add_argument(
        "--repeats", type=bounded(REPEATS), default=5,
        help="timed repetitions per point (at least)",
    )  # fmt: skip
    parser.add_argument(
        "--rounds",
        type=bounded(ROUNDS),
        default=1,
        help="repeat the whole grid in fresh process groups (--ddp: at least 2)",
    )
    parser.add_argument(
        "--min-seconds", type=bounded(MIN_SECONDS), default=0.2,
        help="repeat a point until this much is timed (default %(default)s)",
    )  # fmt: skip
    parser.add_argument(
        "--rated-gbps",
        type=bounded(RATED_GBPS),
        default=0.0,
        help="the link's rated bandwidth, if any",
    )
    parser.add_argument("--out", default="probes/probes.json", help="where to write the records")
    parser.add_argument(
        "--model-out", default="probes/comm-model.json", help="where to write the trained model"
    )
    parser.add_argument(
        "--ddp", metavar="FILE",
        help="instead: probe DDP steps (compute + overhead, 1 process and --world-sizes) and "
        "write the overhead model for rightsize plan --exchange ddp-probe to FILE",
    )  # fmt: skip
    parser.add_argument(
        "--host", default="", help="name the probed host (an instance type); default: this CPU"
    )
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.add_argument("--quiet", action="store_true", help="no progress on stderr")
    parser.set_defaults(run=run)  # fmt: skip


def run(args: argparse.Namespace) -> int:
    if args.ddp:
        return _run_ddp(args)
    from rightsize.profiling.comm_probe import ProbeSettings, probe  # torch: only to measure

    for path, flag in ((args.out, "--out"), (args.model_out, "--model-out")):
        check_output_path(path, flag)  # before probing: the records would be lost
    settings = ProbeSettings(
        world_sizes=tuple(parse_count_list(args.world_sizes, "--world-sizes", "world sizes")),
        min_bytes=parse_memory(args.min_size, "--min-size"),
        max_bytes=parse_memory(args.max_size, "--max-size"),
        concurrency=tuple(
            parse_count_list(args.concurrency, "--concurrency", "transfer counts", CONCURRENCY)
        ),  # fmt: skip
        repeats=args.repeats,
        rounds=args.rounds,
        min_seconds_per_point=args.min_seconds,
        rated_gbps=args.rated_gbps,
        host=args.host,
    )
    settings.validate()
    with tempfile.TemporaryDirectory() as scratch:
        records = probe(settings, Path(scratch), progress_printer(args.quiet))
    atomic_write_text(args.out, json.dumps([r.to_dict() for r in records], indent=1))
    model = LearnedCommModel.fit(records)
    model.save(args.model_out)
    halves = {"small": model.small, "large": model.large}
    if args.json:
        print_json({
            "records": len(records), "records_path": args.out, "model_path": args.model_out,
            "mtu_bytes": model.mtu_bytes,
            "halves": {k: {"chosen": h.candidate, "cv_mape": h.cv_mape} for k, h in halves.items()},
        })  # fmt: skip
        return 0
    print(f"{len(records)} probe records written to {args.out}; model written to {args.model_out}")
    print(
        f"split at the MTU, {format_bytes(model.mtu_bytes)}; cross-validated MAPE of each candidate:"
    )
    print(format_table(
        ["half", "chosen", *(name for name in model.small.cv_mape)],
        [[k, h.candidate, *(f"{v:.1f}%" for v in h.cv_mape.values())] for k, h in halves.items()],
    ))  # fmt: skip
    return 0


def _run_ddp(args: argparse.Namespace) -> int:
    from rightsize.profiling.ddp_probe import DdpProbeSettings, probe_ddp  # torch: only to measure

    worlds = parse_count_list(args.world_sizes, "--world-sizes", "world sizes")
    check_output_path(args.ddp, "--ddp")
    settings = DdpProbeSettings(
        world_sizes=tuple(sorted({1, *worlds})), rounds=max(args.rounds, 2), host=args.host
    )
    settings.validate()
    with tempfile.TemporaryDirectory() as scratch:
        records = probe_ddp(settings, Path(scratch), progress_printer(args.quiet))
    model = DdpOverheadModel(records, settings.host_name())
    model.save(args.ddp)
    if args.json:
        print_json(
            {"host": model.host, "path": args.ddp, "records": [r.to_dict() for r in records]}
        )
        return 0
    print(f"DDP probe of {model.host} written to {args.ddp}; overhead of a DDP step, ms:")
    print(format_table(
        ["world", "gradient", "compute ms", "overhead ms"],
        [[r.world, format_bytes(r.grad_bytes), f"{r.compute_s * 1e3:.2f}",
          f"{r.overhead_s * 1e3:.2f}"] for r in records],
    ))  # fmt: skip
    return 0
