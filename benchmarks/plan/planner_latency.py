"""How long the planner takes to answer: Srift's three cases (§5.2) and the whole AWS GPU catalog.

Srift answers its three cases in 0.67-1.6 s. The cases, on the srift-2020
catalog with spot prices:

1. minimise time, 16 g4dn.8xlarge available, global batch 1024 (Inception);
2. minimise cost, 16 g4dn.8xlarge and 16 g3.8xlarge, global batch 1024 (VGG-19);
3. 1,000 iterations at global batch 6,144 within 10 minutes and $3, with 4
   p3.8xlarge, 8 g3.8xlarge and 8 g4dn.8xlarge (ShuffleNet).

The zoo has no Inception or ShuffleNet: ResNet-50 and MobileNetV2 stand in
(similar size class), profiled here on CIFAR-sized input so the profiles are
quick; the search's work depends on the instance types, batches and caps, not
on the model. The exhaustive search is timed (median of ``--repeats``) with a
fresh estimator each time, so no cache carries over.

On every GPU type of the AWS catalog (38 types, 16 of each; what ``rightsize
plan --cloud aws`` searches) eager mode runs under its solving budget and the
exhaustive search runs to the end, each with fresh options (so no prediction
carries over either), for the five best plans as ``plan`` shows them: the
report says whether eager found the same ones.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repo root: `benchmarks.`
from benchmarks.lib.envelope import write_report
from rightsize.core.catalog import load_catalog
from rightsize.core.spec import Constraints, Objective
from rightsize.perf.comm import AnalyticCommModel
from rightsize.planning.estimate import Estimator, PlanRequest
from rightsize.planning.planner import build_options
from rightsize.planning.search import SearchSettings, search
from rightsize.profiling.bmax import BmaxSearch
from rightsize.profiling.profile import Profile
from rightsize.profiling.profiler import Profiler, ProfilerSettings
from rightsize.workloads import WorkloadRegistry

CASES = [
    {"name": "case 1: min time", "workload": "resnet50", "instances": {"g4dn.8xlarge": 16},
     "batch": 1024, "iterations": 1000, "objective": "time", "deadline_s": None, "budget_usd": None},
    {"name": "case 2: min cost", "workload": "vgg19", "instances": {"g4dn.8xlarge": 16, "g3.8xlarge": 16},
     "batch": 1024, "iterations": 1000, "objective": "cost", "deadline_s": None, "budget_usd": None},
    {"name": "case 3: time and cost limits", "workload": "mobilenetv2",
     "instances": {"p3.8xlarge": 4, "g3.8xlarge": 8, "g4dn.8xlarge": 8},
     "batch": 6144, "iterations": 1000, "objective": "cost", "deadline_s": 600, "budget_usd": 3.0},
]  # fmt: skip


def load_or_profile(name: str, cache: Path) -> Profile:
    path = cache / f"{name}-synthetic-cifar-cpu.json"
    if path.exists():
        return Profile.load(path)
    settings = ProfilerSettings(
        repeats=2, warmup=1, sampling="srift", search=BmaxSearch(max_batch=64)
    )
    workload = WorkloadRegistry().get(name, "synthetic-cifar")
    profile = Profiler(torch.device("cpu"), settings).run(workload, 2 * 2**30)
    profile.save(path)
    return profile


def time_search(make_options, request: PlanRequest, settings: SearchSettings, repeats: int):
    seconds, plans = [], None
    for _ in range(repeats):
        options = make_options()
        estimator = Estimator({o.name: o for o in options}, AnalyticCommModel(), request)
        start = time.perf_counter()
        plans = search(options, estimator, settings)
        seconds.append(time.perf_counter() - start)
    return statistics.median(seconds), plans


def run_case(case: dict, cache: Path, repeats: int) -> dict:
    catalog = load_catalog("srift-2020")
    profile = load_or_profile(case["workload"], cache)
    options = build_options([profile], catalog, case["instances"], spot=True)
    request = PlanRequest(
        case["batch"], case["iterations"],
        Constraints(deadline_s=case["deadline_s"], budget_usd=case["budget_usd"]),
        Objective(case["objective"]),
    )  # fmt: skip
    seconds, plans = time_search(
        lambda: options, request, SearchSettings(mode="exhaustive", top=1), repeats
    )
    best = plans[0]
    return {"case": case["name"], "workload": case["workload"], "mode": "exhaustive",
            "median_seconds": seconds, "best": best.to_dict()}  # fmt: skip


CATALOG_CASES = [
    ("1 h deadline, min cost", PlanRequest(1024, 1000, Constraints(deadline_s=3600), Objective.COST)),
    ("min time", PlanRequest(1024, 1000, Constraints(), Objective.TIME)),
    ("10 min deadline, 5,000 it., B = 2048, min cost",
     PlanRequest(2048, 5000, Constraints(deadline_s=600), Objective.COST)),
]  # fmt: skip


def run_catalog(cache: Path, repeats: int, budget_s: float) -> list[dict]:
    catalog = load_catalog("aws")
    profile = load_or_profile("resnet50", cache)

    def options():  # fresh each time: the options keep their predictions
        return build_options([profile], catalog, {}, spot=False)

    eager = SearchSettings(mode="eager", top=5, eager_budget_s=budget_s)
    exhaustive = SearchSettings(mode="exhaustive", top=5)
    results = []
    for name, request in CATALOG_CASES:
        seconds, plans = time_search(options, request, eager, repeats)
        full_seconds, full = time_search(options, request, exhaustive, 1)
        results.append({
            "case": f"whole AWS GPU catalog, {name}", "instance_types": len(options()),
            "mode": "eager", "eager_budget_s": budget_s, "median_seconds": seconds,
            "best": plans[0].to_dict(), "top": [str(p.config) for p in plans],
            "exhaustive_seconds": full_seconds, "exhaustive_top": [str(p.config) for p in full],
            "same_best": str(plans[0].config) == str(full[0].config),
            "same_top": [str(p.config) for p in plans] == [str(p.config) for p in full],
        })  # fmt: skip
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--eager-budget", type=float, default=1.0, help="eager mode's solving budget, s"
    )
    parser.add_argument("--profiles", default="benchmarks/results/profiles", help="profile cache")
    parser.add_argument("--out", default="benchmarks/results/planner_latency.json")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    cache = Path(args.profiles)
    cache.mkdir(parents=True, exist_ok=True)
    results = [run_case(case, cache, args.repeats) for case in CASES]
    results += run_catalog(cache, args.repeats, args.eager_budget)
    for r in results:
        print(f"{r['case']:32} {r['mode']:10} {1e3 * r['median_seconds']:8.1f} ms  best {r['best']['config']}",
              file=sys.stderr)  # fmt: skip
    report = {"benchmark": "planner_latency", "repeats": args.repeats, "results": results,
              "simulated": "the plans' times and costs are predictions; the latencies are measured"}  # fmt: skip
    write_report(args.out, report)
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
