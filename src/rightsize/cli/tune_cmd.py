"""``rightsize tune``: Packed Hyperband over a search space (packing paper §5, Li et al. Algorithm 1)."""

from __future__ import annotations

import argparse
import math
import os
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from rightsize.cli.args import bounded, parse_options
from rightsize.cli.output import format_table, print_json, progress_printer
from rightsize.cli.store_args import add_database_argument
from rightsize.core.errors import SpecError
from rightsize.core.limits import COUNT, DATASET_SAMPLES, SEED, THREADS, Bound
from rightsize.core.units import format_bytes, format_duration
from rightsize.packing.allocator import ALLOCATOR_MODES, retain_freed_memory
from rightsize.packing.choices import (
    ALGORITHMS,
    BACKWARDS,
    BATCH_MODES,
    DISTANCES,
    IMPLEMENTATIONS,
    PACK_STRATEGIES,
    STEPS_PER_UNIT,
)
from rightsize.service.client import ENV_TOKEN

if TYPE_CHECKING:
    from rightsize.packing.hyperband import Bracket
    from rightsize.packing.runner import TuneSettings
    from rightsize.service.store import Store

# Hyperband's own rules (eta > 1, R >= 1) are checked by hyperband_schedule; these add
# what it does not: finite values, and upper bounds far beyond real use.
#: Hyperband's R: 10^6 units, beyond any schedule in the papers (R = 81 to a few thousand).
MAX_RESOURCE = Bound(None, 10**6)
#: eta keeps 1/eta of the trials per rung: at most 1000 (one rung then).
ETA = Bound(None, 1000)
#: Training steps per unit of resource: 10^6 (R units of it make a trial's longest run).
STEPS_PER_UNIT_BOUND = Bound(1, 10**6, integer=True)
#: knn's distance threshold; infinity (the default) means no threshold.
THRESHOLD = Bound(0, None, allow_infinite=True)


def register(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Run Hyperband (Li et al., Algorithm 1) over a search space, training the "
        "trials of every rung in packs chosen by pack_opt (Liu et al. §5): trials share one input "
        "stream, trials of one architecture are fused into one model, and each keeps its own batch "
        "size, optimizer and learning rate. A trial trained packed gets the result it would get "
        "alone. Prints the best configuration, its validation loss, the wall time and every rung's "
        "packs."
    )
    parser.add_argument(
        "--workload", default="mlp3", help="zoo name or package.module:function (default mlp3)"
    )
    parser.add_argument("--dataset", help="dataset name (default: the workload's own)")
    parser.add_argument(
        "--space", metavar="SPACE.yaml", help="the search space (see examples/spaces/table3.yaml)"
    )
    parser.add_argument(
        "--max-resource",
        type=bounded(MAX_RESOURCE),
        default=81,
        metavar="R",
        help="Hyperband's R, in units of --steps-per-unit steps (default 81)",
    )
    parser.add_argument(
        "--eta",
        type=bounded(ETA),
        default=3,
        help="Hyperband's eta: keep 1/eta per rung (default 3)",
    )
    parser.add_argument(
        "--algorithm",
        choices=ALGORITHMS,
        default="hyperband",
        help="hyperband: Algorithm 1's brackets (default); successive-halving: its most "
        "aggressive bracket alone, the synchronous form of ASHA (fewer trial-steps, no hedge "
        "against early rankings that mislead)",
    )
    parser.add_argument(
        "--configurations",
        type=bounded(COUNT),
        metavar="N",
        help="successive halving's trials (default: as many as Hyperband samples, 143 for "
        "R=81 eta=3); at least eta^s_max so that one reaches R",
    )
    parser.add_argument(
        "--pack",
        choices=PACK_STRATEGIES,
        default="knn",
        help="pack_opt strategy (default knn; none = the original Hyperband)",
    )
    parser.add_argument(
        "--no-pack-gate",
        action="store_true",
        help="train pack_opt's packs as proposed, as the paper does (default: time each kind "
        "of pack against its trials alone first and split the packs that are slower)",
    )
    parser.add_argument(
        "--seed",
        type=bounded(SEED),
        default=0,
        help="seed of data order, sampling and packing (default 0)",
    )
    parser.add_argument(
        "--steps-per-unit",
        type=bounded(STEPS_PER_UNIT_BOUND),
        default=STEPS_PER_UNIT,
        help="training steps per unit of resource (default %(default)s)",
    )
    parser.add_argument(
        "--no-resume",
        action="store_true",
        help="promoted trials restart from scratch instead of their checkpoint",
    )
    parser.add_argument(
        "--memory-limit",
        metavar="SIZE",
        help="memory a pack may use, e.g. 64Mi (default: the device's)",
    )
    parser.add_argument(
        "--threshold",
        type=bounded(THRESHOLD),
        default=math.inf,
        help="knn: largest distance from the centroid to join its pack (default none)",
    )
    parser.add_argument(
        "--max-pack-size",
        type=bounded(COUNT),
        help="at most this many trials per pack (default: as many as fit)",
    )
    parser.add_argument(
        "--distance",
        choices=DISTANCES,
        default="l1",
        help="knn distance (default l1, the paper's worked example)",
    )
    parser.add_argument(
        "--batch-mode",
        choices=BATCH_MODES,
        default="pad",
        help="pad: a fused group computes at its largest batch (paper §3.1.1); exact: fused "
        "groups split by batch size; bucket: split where padding costs more than a group; "
        "ragged: each trial over exactly its own rows (beyond the paper)",
    )
    parser.add_argument(
        "--optimizer-impl",
        choices=IMPLEMENTATIONS,
        default="fused",
        help="torch.optim kernels for packed and unpacked trials: fused (default) or for-loop "
        "(torch.optim's default on the CPU; same math, different rounding)",
    )
    parser.add_argument(
        "--backward",
        choices=BACKWARDS,
        default="direct",
        help="ragged fused MLP groups: direct (the same kernels as autograd, called without "
        "its engine; bit-identical, faster) or autograd",
    )
    parser.add_argument(
        "--workers",
        type=bounded(THREADS),
        default=1,
        metavar="N",
        help="train packs side by side in N processes with one torch thread each (default 1; "
        "each pack then gets 1/N of --memory-limit)",
    )
    parser.add_argument(
        "--concurrent-brackets",
        action="store_true",
        help="run Hyperband's brackets side by side and pack across them (same results; "
        "beyond the paper)",
    )
    parser.add_argument(
        "--mix-activations",
        action="store_true",
        help="also fuse trials that differ only in activation function (beyond the paper)",
    )
    parser.add_argument(
        "--no-fuse",
        action="store_true",
        help="never fuse trials; every trial runs its own model on the shared batch",
    )
    parser.add_argument(
        "--option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="model option fixed for every trial (repeatable)",
    )
    parser.add_argument(
        "--profile",
        metavar="FILE",
        help="take trial memory footprints from a saved profile (default: measure them)",
    )
    parser.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N (default cpu)")
    parser.add_argument(
        "--threads",
        type=bounded(THREADS),
        metavar="N",
        help="torch intra-op threads (default: torch's)",
    )
    parser.add_argument(
        "--allocator",
        choices=ALLOCATOR_MODES,
        default="retain",
        help="retain: keep freed heap memory (fewer page faults, docs/tuning.md); default: glibc's behaviour",
    )
    parser.add_argument(
        "--dataset-size",
        type=bounded(DATASET_SAMPLES),
        metavar="N",
        help=f"nominal size of a synthetic dataset ({DATASET_SAMPLES.rule()})",
    )
    parser.add_argument(
        "--optuna-storage",
        metavar="URL",
        help="write the search into an Optuna study in this storage, e.g. sqlite:///tune.db "
        "(with --optuna-study; --optuna-sampler proposes the configurations; run again to resume; needs "
        "the optuna extra)",
    )
    parser.add_argument(
        "--optuna-study", metavar="NAME", help="the Optuna study's name (with --optuna-storage)"
    )
    parser.add_argument(
        "--optuna-sampler",
        choices=("tpe", "random"),
        default="tpe",
        help="what proposes a new study's configurations: multivariate TPE with the constant "
        "liar (Optuna 5's defaults; default) or random; a loaded study keeps proposing with it",
    )
    parser.add_argument(
        "--schedule-only",
        action="store_true",
        help="print the algorithm's brackets without training",
    )
    parser.add_argument(
        "--name", metavar="NAME", help="the study's name in the store (default: workload, "
        "space and seed, e.g. mlp3-small-seed0)"
    )  # fmt: skip
    add_database_argument(parser)
    parser.add_argument(
        "--token", help=f"keep the study as this token's (default ${ENV_TOKEN}); without one it "
        "is the host's, seen by every token of a service on this store"
    )  # fmt: skip
    parser.add_argument(
        "--no-store", action="store_true", help="do not write the study into the store"
    )  # fmt: skip
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.add_argument("--quiet", action="store_true", help="no progress on stderr")
    parser.set_defaults(run=run)  # fmt: skip


def run(args: argparse.Namespace) -> int:
    from rightsize.packing.hyperband import search_schedule

    schedule = search_schedule(args.algorithm, args.max_resource, args.eta, args.configurations)
    if args.schedule_only:
        return _print_schedule(schedule, args.json)
    if not args.space:
        raise SpecError(
            "--space is required (a YAML file of hyper-parameter lists) unless --schedule-only"
        )
    # the trials are PyTorch code: torch is imported for a search, not for --help
    from rightsize.packing.runner import (
        model_option_names,
        prepare_search,
        run_search,
        search_report,
    )
    from rightsize.packing.space import load_space
    from rightsize.workloads.registry import WorkloadRegistry

    registry = WorkloadRegistry()
    space = load_space(args.space, model_option_names(registry, args.workload))
    settings = _settings(args)
    study = _optuna_study(args)
    keeper = None if args.no_store else StudyKeeper.opened(args)  # a bad store fails here
    _apply_process_settings(args)
    progress = progress_printer(args.quiet)
    if study is not None:
        report = _optuna_report(study, space, settings, registry, progress, args)
    else:
        search = prepare_search(settings, space, registry, progress)
        report = search_report(search, run_search(search))
    if keeper is not None:
        report["stored"] = keeper.keep(report)
    if args.json:
        print_json(report)
    else:
        _print_report(report)
    return 0


@dataclass(frozen=True)
class StudyKeeper:
    """Where the search's report goes when it ends: the store, as a study of the token's
    owner, or of the host (every token of a service on that store sees those)."""

    store: Store
    owner_id: int | None
    name: str

    @classmethod
    def opened(cls, args: argparse.Namespace) -> StudyKeeper:
        """The store and owner, checked before anything trains.

        Raises:
            SpecError: the store cannot be opened, or the token is not one of its tokens.
        """
        from rightsize.service.store import Store  # SQLAlchemy: only when a search stores

        store = Store(args.database)
        token = args.token or os.environ.get(ENV_TOKEN)
        owner_id = None
        if token:
            owner_id = store.owner(token)
            if owner_id is None:
                store.close()
                raise SpecError(f"--token: not a token of the store at {store.shown_url} (make "
                                "one there: rightsize serve token create NAME; or --no-store)")  # fmt: skip
        name = args.name or f"{args.workload}-{Path(args.space).stem}-seed{args.seed}"
        return cls(store, owner_id, name)

    def keep(self, report: dict) -> dict:
        """Write ``report`` as a study; where it went (a failing store warns, as run's does)."""
        try:
            view = self.store.add_study(self.owner_id, self.name, report)
        except Exception as exc:  # noqa: BLE001 - the search's result is printed regardless
            print(f"warning: the study was not written to the store: {exc}", file=sys.stderr)
            return {}
        finally:
            self.store.close()
        return {"study_id": view.id, "name": view.name, "store": self.store.shown_url,
                "owner": "token" if self.owner_id is not None else "host"}  # fmt: skip


def _optuna_study(args: argparse.Namespace):
    """The Optuna study named by --optuna-storage and --optuna-study, or None."""
    if args.optuna_storage is None and args.optuna_study is None:
        return None
    if not (args.optuna_storage and args.optuna_study):
        raise SpecError("--optuna-storage and --optuna-study go together: give both, or neither")
    try:
        import optuna

        from rightsize.integrations.optuna import open_study
    except ModuleNotFoundError as exc:
        if exc.name != "optuna":
            raise
        raise SpecError("--optuna-storage needs Optuna: pip install 'rightsize[optuna]'") from None
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # progress comes from rightsize
    return open_study(args.optuna_storage, args.optuna_study, args.seed, args.optuna_sampler)


def _optuna_report(study, space, settings, registry, progress, args) -> dict:
    from rightsize.integrations.optuna import optimize
    from rightsize.packing.runner import search_report

    ran = optimize(study, space, settings, registry, progress)
    report = search_report(ran.search, ran.result)
    report["optuna"] = {
        "storage": args.optuna_storage, "study": args.optuna_study,
        "sampler": args.optuna_sampler,
        "brackets_run": list(ran.brackets_run), "trials": len(study.trials),
    }  # fmt: skip
    return report


def _settings(args: argparse.Namespace) -> TuneSettings:
    from rightsize.cli.profile_cmd import memory_limit
    from rightsize.packing.pack import PackSettings
    from rightsize.packing.packopt import PackOptSettings
    from rightsize.packing.probe import ProbeSettings
    from rightsize.packing.runner import TuneSettings
    from rightsize.profiling.device import resolve_device

    limit = memory_limit(args.memory_limit, resolve_device(args.device))
    return TuneSettings(
        workload=args.workload, dataset=args.dataset,
        fixed_options=tuple(sorted(parse_options(args.option).items())),
        max_resource=args.max_resource, eta=args.eta, algorithm=args.algorithm,
        configurations=args.configurations, seed=args.seed, steps_per_unit=args.steps_per_unit,
        resume=not args.no_resume, device=args.device,
        concurrent_brackets=args.concurrent_brackets,
        memory_limit_bytes=limit, profile_path=args.profile,
        packopt=PackOptSettings(args.pack, args.threshold, args.max_pack_size, args.distance),
        probe=ProbeSettings(enabled=not args.no_pack_gate),
        pack=PackSettings(
            fuse=not args.no_fuse, batch_mode=args.batch_mode,
            mix_activations=args.mix_activations, optimizer_impl=args.optimizer_impl,
            backward=args.backward,
        ),
        unpacked_engine=f"torch-{args.optimizer_impl}",
        workers=args.workers, worker_allocator=args.allocator,
        dataset_size=args.dataset_size,
    )  # fmt: skip


def _apply_process_settings(args: argparse.Namespace) -> None:
    if args.threads is not None:
        import torch

        torch.set_num_threads(args.threads)
    if args.allocator == "retain":
        retain_freed_memory()


def schedule_data(schedule: list[Bracket]) -> list[dict]:
    """The bracket table as ``[{"s", "rungs": [{"n", "r"}]}]``."""
    return [
        {"s": b.s, "rungs": [{"n": rung.n, "r": _number(rung.r)} for rung in b.rungs]}
        for b in schedule
    ]


def _number(value: float) -> int | float:
    return int(value) if float(value).is_integer() else value


def _print_schedule(schedule: list[Bracket], as_json: bool) -> int:
    data = schedule_data(schedule)
    if as_json:
        print_json(data)
        return 0
    rows = [[b["s"], " ".join(f"({r['n']},{r['r']:g})" for r in b["rungs"])] for b in data]
    print(format_table(["s", "rungs (n_i, r_i)"], rows))
    return 0


def _print_gate(gate: dict | None) -> None:
    """The pack gate's measurements: which kinds of pack beat their trials alone."""
    if not gate or not gate["probes"]:
        return
    kept = sum(p["packed"] for p in gate["probes"])
    print(
        f"pack gate: {len(gate['probes'])} kinds of pack timed in "
        f"{format_duration(gate['seconds'])}, {kept} kept, {len(gate['probes']) - kept} split "
        f"(a pack must save {gate['min_gain']:.0%} of its trials' time alone):"
    )
    for p in gate["probes"]:
        kinds = "; ".join(" ".join(f"{k}={v}" for k, v in a.items()) for a in p["architectures"])
        print(
            f"  {p['trials']:>3} trials{' (' + kinds + ')' if kinds else ''}: packed "
            f"{p['pack_ms_per_step']:.2f} ms/step, alone {p['alone_ms_per_step']:.2f} ms/step, "
            f"IMPV {p['gain']:+.2f} -> {'pack' if p['packed'] else 'split'}"
        )


_ALGORITHM_NAMES = {"hyperband": "Hyperband", "successive-halving": "successive halving"}


def _print_report(report: dict) -> None:
    best, concurrent = report["best"], report.get("concurrent_brackets", False)
    print(
        f"tune {report['workload']} on {report['dataset']}: {report['space_size']:,} configurations, "
        f"{_ALGORITHM_NAMES[report.get('algorithm', 'hyperband')]} R={report['max_resource']:g} "
        f"eta={report['eta']:g}, {report.get('configurations', len(report['trials']))} trials, "
        f"pack {report['strategy']}, seed {report['seed']}"
    )
    print("best:  " + " ".join(f"{k}={v}" for k, v in best["config"].items()))
    print(
        f"  validation loss {best['val_loss']:.4f} (trial {best['trial_id']}, r={best['resource']:g})"
    )
    if "optuna" in report:
        study = report["optuna"]
        print(
            f"optuna study {study['study']!r} in {study['storage']}: {study['trials']} trials; "
            f"brackets run now: {' '.join(f's={s}' for s in study['brackets_run']) or 'none'}"
        )
    if report.get("stored"):
        kept = report["stored"]
        whose = "your token's" if kept["owner"] == "token" else "the host's: every token sees it"
        print(f"kept as study {kept['study_id']} ({kept['name']}, {whose}) in {kept['store']}; "
              f"the service shows it at /ui/#/studies/{kept['study_id']}")  # fmt: skip
    print(
        f"wall time {format_duration(report['wall_s'])}; {report['trial_steps']:,} trial-steps "
        f"({report['steps_per_unit']} steps per unit); pack memory limit "
        f"{format_bytes(report['memory_capacity_bytes'])}"
        + (f" each on {report['workers']} workers" if report.get("workers", 1) > 1 else "")
        + ("; brackets run concurrently" if concurrent else "")
    )
    _print_gate(report.get("pack_gate"))
    print()
    rows = [
        [r["bracket"], r["rung"], r["n"], f"{r['r']:g}", r["steps"], len(r["packs"]),
         max(len(p) for p in r["packs"]), format_duration(r["wall_s"]), format_duration(r["switch_s"])]
        for r in report["rungs"]
    ]  # fmt: skip
    print(
        format_table(["s", "rung", "n", "r", "steps", "packs", "largest", "wall", "switch"], rows)
    )
    # concurrent brackets: packs mix brackets, so keep the bracket in each id
    print("\npack groups per rung (trial ids" + (", per phase" if concurrent else "") + "):")
    for r in report["rungs"]:
        ids = (lambda i: i) if concurrent else (lambda i: i.split("-", 1)[1])
        groups = " ".join("[" + " ".join(ids(i) for i in p) + "]" for p in r["packs"])
        print(textwrap.fill(groups, width=100, initial_indent=f"  s={r['bracket']} rung {r['rung']}: ",
                            subsequent_indent="      "))  # fmt: skip
